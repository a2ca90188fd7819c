"""The intermediate representation: types, core expressions, HIR."""
