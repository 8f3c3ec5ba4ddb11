"""How much of 3xTF32's error is the operand split (session 9, docs/findings/README.md)

Simulates 64-term fp32 dot products of normal fp32 inputs, summed sequentially in fp32, three
ways: exact fp32 products; each operand split once into big = tf32(x) plus small = tf32(x - big)
(what the harness's tf32x3 baselines do); and CUTLASS's 3xTF32 product big*big + big*small +
small*big (small*small dropped). Prints each error's RMS relative to the root-sum-square of the
products, in units of u = 2^-24, and the per-product and per-operand errors. Plain numpy, CPU.

    python3 tf32x3_split_simulation.py
"""
import numpy as np


def tf32(x):
    """fp32 -> fp32 with the significand rounded to 10 explicit bits, nearest even."""
    i = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    lsb = (i >> 13) & 1
    return ((i + (1 << 12) - 1 + lsb) & ~np.uint64((1 << 13) - 1)).astype(np.uint32).view(np.float32)


def split(x):
    big = tf32(x)
    return big, tf32((x - big).astype(np.float32))


def main(n=20000, d=64, seed=1):
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(2))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = (a64 * b64).sum(1)
    scale = np.sqrt(((a64 * b64) ** 2).sum(1))

    def sequential_fp32(products):
        acc = np.zeros(n, np.float32)
        for k in range(d):
            acc = (acc + products[:, k]).astype(np.float32)
        return acc.astype(np.float64)

    ab, a_s = split(a)
    bb, b_s = split(b)
    split_products = (ab.astype(np.float64) + a_s) * (bb.astype(np.float64) + b_s)
    three = ab.astype(np.float64) * bb + ab.astype(np.float64) * b_s + a_s.astype(np.float64) * bb
    u = 2.0 ** -24
    for name, products in (("exact fp32 products", a * b), ("operands split once", split_products.astype(np.float32)),
                           ("3xTF32 (small*small dropped)", three.astype(np.float32))):
        err = (sequential_fp32(products) - exact) / scale
        print("%-30s dot-product error RMS %.2f u" % (name, np.sqrt(np.mean(err ** 2)) / u))
    rel = lambda p: np.sqrt(np.mean(((p - a64 * b64) / np.abs(a64 * b64)) ** 2)) / u
    print("per product: split %.2f u, 3xTF32 %.2f u RMS" % (rel(split_products), rel(three)))
    op = np.abs((ab.astype(np.float64) + a_s).ravel() - a64.ravel()) / np.abs(a64.ravel())
    print("per operand: split %.2f u RMS, %.2f u max" % (np.sqrt(np.mean(op ** 2)) / u, op.max() / u))


if __name__ == "__main__":
    main()
