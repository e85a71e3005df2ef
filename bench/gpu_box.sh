#!/usr/bin/env bash
# How bench/results/gpu.json was produced on an offline GPU box (recipe: ../shared/gpu/README.md).
# Run from the project root there, with the bundle parts (vb.tar.xz.0?) in /tmp/parts and
# .gpu/run/ holding the market pool (python -m bench gpu --build-pool .gpu/run/market.csv, built
# where ../shared/data is) and pure-Python wheels the box lacks (diskcache, openpyxl, et-xmlfile, tqdm).
#   bash bench/gpu_box.sh setup            unpack vLLM 0.26.0 + the client's wheels
#   bash bench/gpu_box.sh serve [FLAGS…]   start vLLM (CUDA graphs, xgrammar compact JSON), wait until ready
#   bash bench/gpu_box.sh bench PARTS      python -m bench gpu --parts PARTS, results in /tmp/gpu.json
set -euo pipefail
MAX_SEQS=${MAX_SEQS:-1024}
case "${1:-}" in
  setup)
    cd /tmp/parts && cat vb.tar.xz.0? > vb.tar.xz && sha256sum -c vb.tar.xz.sha256 && tar -C /tmp -xJf vb.tar.xz
    cd - >/dev/null
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/run/whl/*.whl
    ;;
  serve)
    shift
    MAX_SEQS=$MAX_SEQS EAGER_FLAG= bash /tmp/vb/scripts/serve.sh "$@"
    grep -E "KV cache|Maximum concurrency|cudagraph|CUDA graph" /tmp/vb/vllm.log | tail -6 || true
    ;;
  bench)
    export PYTHONPATH=/tmp/site:/tmp/vb/site:$PWD PYTHONUNBUFFERED=1
    flags="vllm serve (dummy weights, Qwen3-8B shape, bf16, CUDA graphs) --max-model-len 8192"
    flags+=" --gpu-memory-utilization 0.90 --max-num-seqs $MAX_SEQS --generation-config vllm --seed 0"
    flags+=" --structured-outputs-config {\"backend\":\"xgrammar\",\"disable_any_whitespace\":true}"
    python3 -m bench gpu --engine-url http://127.0.0.1:8000/v1 --parts "$2" --pool .gpu/run/market.csv \
      --server-flags "$flags" --out /tmp/gpu.json
    ;;
  *) echo "usage: $0 setup|serve|bench PARTS" >&2; exit 2 ;;
esac
