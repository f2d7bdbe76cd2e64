"""TPU: torchax -> jax.export with libtpu AOT compiles, runners on jax CPU and on a TPU host."""
