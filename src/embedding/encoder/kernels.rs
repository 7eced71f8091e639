//! Numeric kernels of the forward pass: pooling, softmax, GELU and exp (AVX2 and portable).

/// Per sequence: mean over its rows of `states`, then divided by its Euclidean norm (with the
/// 1e-12 floor sentence-transformers' `Normalize` uses).
pub(super) fn pool_and_normalise(
    sequences: &[&[u32]],
    states: &[f32],
    hidden: usize,
) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(sequences.len());
    let mut row = 0;
    for ids in sequences {
        let mut sum = vec![0.0f32; hidden];
        for _ in 0..ids.len() {
            for (s, x) in sum.iter_mut().zip(&states[row * hidden..][..hidden]) {
                *s += x;
            }
            row += 1;
        }
        let count = ids.len().max(1) as f32;
        for s in &mut sum {
            *s /= count;
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        for s in &mut sum {
            *s /= norm;
        }
        out.push(sum);
    }
    out
}

pub(super) fn resize(buffer: &mut Vec<f32>, len: usize) {
    if buffer.len() < len {
        // Exactly: `resize` alone may double the capacity, and these buffers are the largest
        // allocations of an embedding run.
        buffer.reserve_exact(len - buffer.len());
        buffer.resize(len, 0.0);
    }
}

pub(super) fn add_in_place(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

pub(super) fn softmax_in_place(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for x in row.iter_mut() {
        *x -= max;
    }
    exp_in_place(row);
    let inverse = 1.0 / row.iter().sum::<f32>();
    for x in row.iter_mut() {
        *x *= inverse;
    }
}

/// Exact (erf-based) GELU, `0.5·x·(1 + erf(x/√2))`, as BERT's `hidden_act = "gelu"` specifies.
///
/// This runs on every element of the `[tokens × 1536]` intermediate activations and took a
/// quarter of the encoder's time with libm's scalar `erff`; the branch-free version below lets
/// LLVM vectorise the loop (8 lanes with AVX2, selected at run time).
pub(super) fn gelu_in_place(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked on the line above).
        unsafe { gelu_avx2(values) };
        return;
    }
    gelu_portable(values);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) fn gelu_avx2(values: &mut [f32]) {
    gelu_portable(values);
}

#[inline(always)]
pub(super) fn gelu_portable(values: &mut [f32]) {
    for x in values.iter_mut() {
        *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// `e^x` for every element (same dispatch as [`gelu_in_place`]).
pub(super) fn exp_in_place(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked on the line above).
        unsafe { exp_avx2(values) };
        return;
    }
    exp_portable(values);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) fn exp_avx2(values: &mut [f32]) {
    exp_portable(values);
}

#[inline(always)]
pub(super) fn exp_portable(values: &mut [f32]) {
    for x in values.iter_mut() {
        *x = exp(*x);
    }
}

/// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), branch-free:
/// `erf(|x|) = 1 − t·(a1 + t·(a2 + t·(a3 + t·(a4 + t·a5))))·e^(−x²)` with `t = 1/(1 + p·|x|)`,
/// sign restored afterwards.
#[inline(always)]
pub(super) fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A1: f32 = 0.254_829_6;
    const A2: f32 = -0.284_496_74;
    const A3: f32 = 1.421_413_7;
    const A4: f32 = -1.453_152_1;
    const A5: f32 = 1.061_405_4;
    let magnitude = x.abs();
    let t = 1.0 / (1.0 + P * magnitude);
    let polynomial = t * (A1 + t * (A2 + t * (A3 + t * (A4 + t * A5))));
    let value = 1.0 - polynomial * exp(-magnitude * magnitude);
    value.copysign(x)
}

/// `e^x` in single precision without branches: `x = k·ln 2 + r` with integer k and
/// `|r| ≤ ln 2 / 2`, `e^r` by its degree-7 Taylor polynomial (relative error below 1e-8 on
/// that interval), and `2^k` assembled in the exponent bits. Inputs are clamped to
/// [−87, 88], which keeps `2^k` a normal float; `e^−87` is below every value that matters here.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    // 1.5·2^23: adding and subtracting it rounds a float of magnitude < 2^22 to an integer.
    const ROUNDER: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.clamp(-87.0, 88.0);
    let k = (x * std::f32::consts::LOG2_E + ROUNDER) - ROUNDER;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let polynomial = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let scale = f32::from_bits(((k as i32 + 127) as u32) << 23);
    polynomial * scale
}
