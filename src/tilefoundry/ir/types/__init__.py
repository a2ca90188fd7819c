"""Types of the IR: dtypes, storage kinds, shape dims, tensor/tuple/callable types."""
