"""The bucket sizes the compiling adapters pad their calls to (flex_buckets.py, jax_sdpa.py), so
that a campaign compiles a few programs instead of one per shape. Plain Python: no framework."""


def bucket(n, floor, factor=2):
    """The smallest floor * factor^k >= n."""
    b = floor
    while b < n:
        b *= factor
    return b
