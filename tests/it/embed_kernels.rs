//! Which matrix kernels the local embedder runs on: `gemm`'s AVX-512 kernels where the CPU has
//! AVX-512 (the `x86-v4` feature, chosen at run time by CPU detection), its AVX2/FMA kernels
//! everywhere else, and the same vectors either way.
//!
//! Which kernels ran is proven by what the kernel selection reports
//! (`mragent::embedding::matrix_kernels`), never by exact bits against another host: `gemm` sizes
//! its blocking from the host's cache sizes (user-mode QEMU passes the host's
//! `/sys/devices/system/cpu` through), so the last bits of a vector follow the host's caches.
//! Vectors are compared within cosine 0.999999; bits are compared only between two computations
//! on the same host.
//!
//! `tests/fixtures/embedding/fma_kernels.json` holds the vectors of the AVX2/FMA kernels (the
//! only ones before `x86-v4` was enabled). To regenerate it, run the child body on a CPU without
//! AVX-512, e.g. under user-mode QEMU:
//! `MRAGENT_KERNEL_VECTORS_OUT=tests/fixtures/embedding/fma_kernels.json qemu-x86_64 -cpu Haswell
//! <the it test binary> --ignored --exact embed_kernels::write_kernel_vectors`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use mragent::embedding::{MatrixKernels, matrix_kernels};

use crate::retrieval::embedder;

/// Where [`write_kernel_vectors`] writes its result.
const OUT_ENV: &str = "MRAGENT_KERNEL_VECTORS_OUT";

/// Vectors of the fixture texts, whether the CPU that computed them reported AVX-512F and which
/// matrix kernels the selection reported (absent in the fixture, which predates the report).
#[derive(Serialize, Deserialize)]
struct KernelVectors {
    avx512f: bool,
    #[serde(default)]
    kernels: Option<MatrixKernels>,
    texts: Vec<String>,
    vectors: Vec<Vec<f32>>,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture_path() -> PathBuf {
    repo_root().join("tests/fixtures/embedding/fma_kernels.json")
}

/// The parity sentences (one of them longer than 256 word pieces) and the first 26 LoCoMo turns,
/// as `speaker: text`: several packed chunks of different sizes.
fn texts() -> Vec<String> {
    #[derive(Deserialize)]
    struct Sentences {
        sentences: Vec<String>,
    }
    let path = repo_root().join("tests/fixtures/embedding/sentences.json");
    let mut texts = serde_json::from_str::<Sentences>(&std::fs::read_to_string(path).unwrap())
        .unwrap()
        .sentences;
    let locomo = repo_root().join("data/dataset_locomo.json");
    let samples: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(locomo).unwrap()).unwrap();
    let turns = samples[0]["conversation"]["session_1"].as_array().unwrap();
    for turn in turns.iter().take(26) {
        texts.push(format!(
            "{}: {}",
            turn["speaker"].as_str().unwrap(),
            turn["text"].as_str().unwrap()
        ));
    }
    texts
}

fn has_avx512f() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

fn compute() -> KernelVectors {
    let texts = texts();
    let vectors = embedder().embed_blocking(&texts).unwrap();
    KernelVectors { avx512f: has_avx512f(), kernels: Some(matrix_kernels()), texts, vectors }
}

fn read(path: &Path) -> KernelVectors {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn assert_close(got: &KernelVectors, want: &KernelVectors, what: &str) {
    assert_eq!(got.texts, want.texts, "{what}: texts differ");
    assert_eq!(got.vectors.len(), want.vectors.len());
    for ((text, a), b) in got.texts.iter().zip(&got.vectors).zip(&want.vectors) {
        let similarity = cosine(a, b);
        assert!(similarity >= 0.999_999, "{what}: cosine {similarity} for {text:?}");
    }
}

/// The body of the child process of [`cpu_without_avx512_falls_back_to_the_fma_kernels`] (and
/// the fixture's generator); ignored in a normal run.
#[test]
#[ignore = "run in a child process by cpu_without_avx512_falls_back_to_the_fma_kernels"]
fn write_kernel_vectors() {
    let out = std::env::var_os(OUT_ENV).expect("MRAGENT_KERNEL_VECTORS_OUT names the output");
    let json = serde_json::to_string(&compute()).unwrap();
    std::fs::write(out, json + "\n").unwrap();
}

#[test]
fn vectors_stay_within_cosine_0_999999_of_the_fma_kernels() {
    let fixture = read(&fixture_path());
    assert!(!fixture.avx512f, "the fixture must come from the AVX2/FMA kernels");
    let now = compute();
    assert_close(&now, &fixture, "this CPU against the FMA-kernel fixture");
    let expected = if now.avx512f { MatrixKernels::Avx512 } else { MatrixKernels::Fma };
    assert_eq!(now.kernels, Some(expected), "kernel selection on this CPU");
}

/// `qemu-x86_64` on `PATH`, if installed (Debian package `qemu-user`; `.ci/run` installs it).
fn qemu() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("qemu-x86_64")).find(|p| p.is_file())
}

/// Runs this test binary's [`write_kernel_vectors`] on an emulated Haswell (AVX2 and FMA, no
/// AVX-512): the CPU detection there must report no AVX-512F and the FMA kernels, and the vectors
/// must be within cosine 0.999999 of the FMA-kernel fixture and of this CPU's. On an AVX-512
/// host, the emulated vectors must also differ in some bits from the native ones computed on the
/// same host: different kernels sum in a different order, which proves that this build has
/// gemm's AVX-512 kernels (feature `x86-v4`) and that the host runs them.
#[test]
fn cpu_without_avx512_falls_back_to_the_fma_kernels() {
    let Some(qemu) = qemu() else {
        assert!(std::env::var_os("CI").is_none(), "CI must install qemu-user for this test");
        eprintln!("SKIPPED: qemu-x86_64 not installed (apt-get install qemu-user)");
        return;
    };
    let native = compute(); // also installs the model before the child needs it
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("vectors.json");
    // Output captured: QEMU warns about every host-only CPUID bit it cannot emulate.
    let child = Command::new(qemu)
        .args(["-cpu", "Haswell"])
        .arg(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "embed_kernels::write_kernel_vectors", "--test-threads=1"])
        .env(OUT_ENV, &out)
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "child under qemu failed: {}\n{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    let emulated = read(&out);
    assert!(!emulated.avx512f, "the emulated Haswell must not report AVX-512F");
    assert_eq!(
        emulated.kernels,
        Some(MatrixKernels::Fma),
        "the fallback must select the FMA kernels"
    );
    let fixture = read(&fixture_path());
    assert_close(&emulated, &fixture, "emulated Haswell against the FMA-kernel fixture");
    assert_close(&emulated, &native, "emulated Haswell against this CPU");
    if native.kernels == Some(MatrixKernels::Avx512) {
        assert_ne!(
            emulated.vectors, native.vectors,
            "AVX-512 host but the FMA kernels' exact bits"
        );
    }
}
