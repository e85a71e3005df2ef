#!/usr/bin/env bash
# How bench/results/gpu.json was produced on an offline GPU box (recipe: ../shared/gpu/README.md).
# Run from the project root there, with the bundle parts (vb.tar.xz.0?) in /tmp/parts and
# .gpu/run/ holding the market pool (python -m bench gpu --build-pool .gpu/run/market.csv, built
# where ../shared/data is), the document pool's texts (--build-doc-source .gpu/run/docs.json.gz), the
# annual-report PDFs for part files (.gpu/run/pdfs/*.pdf, from ../shared/data/ashare/annual_reports) and, in
# .gpu/run/whl, wheels for Python 3.12 of what the box lacks (diskcache, openpyxl, et-xmlfile, tqdm,
# pydantic-settings, python-dotenv, pypdfium2; xlwings for part files, whose runner lives beside the Excel bench).
# BACKEND=guidance picks the structured-output backend (default xgrammar), MAX_SEQS the sequences.
#   bash server/gpu_box.sh setup            unpack vLLM 0.26.0 + the client's wheels
#   bash server/gpu_box.sh serve [FLAGS…]   start vLLM (CUDA graphs, xgrammar compact JSON), wait until ready
#   bash server/gpu_box.sh replicas N [FLAGS…]  N independent vLLM servers on ports 8000… sharing the GPU
#   bash server/gpu_box.sh gpus N [FLAGS…]  one vLLM server per GPU on ports 8000…, started together
#   bash server/gpu_box.sh stop             stop every server started here
#   bash server/gpu_box.sh eval GOLD.csv…   xladdin eval against the server(s), reports in /tmp/eval-NAME.json
#   bash server/gpu_box.sh ray              part ray_files (ray.data.llm's vLLM processor; servers stopped first)
#   bash server/gpu_box.sh bench PARTS      python -m bench gpu --parts PARTS, results in $OUT_JSON (/tmp/gpu.json)
#                                           (BENCH_FLAGS=--no-rerun: no rerun from the cache; XLADDIN_READERS=N
#                                           for part files' reader processes)
#                                           (URLS=http://127.0.0.1:8000/v1,http://127.0.0.1:8001/v1 for replicas)
#   bash server/gpu_box.sh profile PARTS    bench PARTS with the GPU sampled every 250 ms (utilisation, power, SM
#                                           clock), every process's CPU (top) and the engine core's Python stacks by py-spy
#                                           (.gpu/run/tools/py_spy-*.whl) from PROFILE_AT s (8) for PROFILE_S s (15),
#                                           into $PROFILE_DIR (/tmp/profile); python -m bench.engine_profile DIR sums them
#                                           (a device call brings back at most 8 files of $OUT: tar the folder there)
set -euo pipefail
MAX_SEQS=${MAX_SEQS:-1024}
BACKEND=${BACKEND:-xgrammar}  # the structured-output backend (xgrammar or guidance)
SO_CONFIG="{\"backend\":\"$BACKEND\",\"disable_any_whitespace\":true}"
T0=$(date +%s)
RECIPE="vllm serve (dummy weights, Qwen3-8B shape, bf16, CUDA graphs) --max-model-len 8192"

start_one() {  # PORT GPU_MEMORY_SHARE DEVICE(empty: every GPU) [FLAGS…]: one vLLM server in the background
  local port=$1 mem=$2 dev=$3
  shift 3
  . /tmp/vb/scripts/env.sh
  local args=(--gpu-memory-utilization "$mem" --max-num-seqs "$MAX_SEQS" --generation-config vllm --seed 0
              --structured-outputs-config "$SO_CONFIG" "$@")
  echo "$RECIPE ${args[*]}" > /tmp/vb/vllm-$port.flags  # what bench records as the server's flags
  # every descriptor goes to the log: nothing keeps the caller's output (a pipe) open
  (cd /tmp/vb && exec env ${dev:+CUDA_VISIBLE_DEVICES=$dev} setsid nohup python3 -m vllm.entrypoints.cli.main serve \
    "$MODEL_DIR" --served-model-name "$SERVED" --load-format dummy --dtype bfloat16 --max-model-len 8192 \
    "${args[@]}" --host 127.0.0.1 --port "$port" --uvicorn-log-level warning --disable-uvicorn-access-log) \
    > /tmp/vb/vllm-$port.log 2>&1 < /dev/null &
}

wait_ready() {  # PORT: until the server answers, or its log when it died
  local port=$1
  until python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" 2>/dev/null; do
    sleep 1
    pgrep -f "[v]llm.entrypoints.cli.main serve.*--port $port " >/dev/null || { tail -40 /tmp/vb/vllm-$port.log; exit 1; }
  done
  echo "server $port ready after $(( $(date +%s) - T0 )) s"
  grep -E "KV cache|Maximum concurrency" /tmp/vb/vllm-$port.log | tail -2 || true
}

case "${1:-}" in
  setup)
    cd /tmp/parts && cat vb.tar.xz.0? > vb.tar.xz && sha256sum -c vb.tar.xz.sha256 && tar -C /tmp -xJf vb.tar.xz
    cd - >/dev/null
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/run/whl/*.whl
    ;;
  serve)
    shift
    rm -f /tmp/vb/vllm-*.flags  # the bundle's script: bench records MAX_SEQS and EXTRA_FLAGS instead
    MAX_SEQS=$MAX_SEQS EAGER_FLAG= bash /tmp/vb/scripts/serve.sh --structured-outputs-config "$SO_CONFIG" "$@"
    grep -E "KV cache|Maximum concurrency|cudagraph|CUDA graph" /tmp/vb/vllm.log | tail -6 || true
    ;;
  replicas)
    # N servers sharing the one GPU, started one at a time: each measures the GPU memory left
    n=$2; shift 2
    for i in $(seq 0 $((n - 1))); do
      start_one $((8000 + i)) "$(python3 -c "print(round(0.9 / $n, 3))")" "" "$@"
      wait_ready $((8000 + i))
    done
    ;;
  gpus)
    # one server per GPU (CUDA_VISIBLE_DEVICES=i, port 8000+i), all starting at once
    n=$2; shift 2
    for i in $(seq 0 $((n - 1))); do start_one $((8000 + i)) 0.90 "$i" "$@"; done
    for i in $(seq 0 $((n - 1))); do wait_ready $((8000 + i)); done
    ;;
  eval)
    # xladdin eval on gold files built where ../shared/data is (python -m bench gold / news): dummy weights
    # measure the plumbing only. Reports in /tmp/eval-NAME.json
    shift
    export PYTHONPATH=/tmp/site:/tmp/vb/site:$PWD PYTHONUNBUFFERED=1
    for gold in "$@"; do
      python3 -c "from xladdin.cli.main import main; raise SystemExit(main())" eval "$gold" --no-progress \
        --engine-url "${URLS:-http://127.0.0.1:8000/v1}" --no-cache -o "/tmp/eval-$(basename "$gold" .csv).json"
    done
    ;;
  stop)
    # by command line: setsid forks under job control, so a recorded pid may be its parent's
    pkill -TERM -f "[v]llm.entrypoints.cli.main serve" || true
    sleep 8
    pkill -KILL -f "[v]llm.entrypoints.cli.main serve" || true
    rm -f /tmp/vb/vllm-*.flags
    ;;
  bench)
    export PYTHONPATH=/tmp/site:/tmp/vb/site:$PWD PYTHONUNBUFFERED=1
    # the flags start_one wrote for the first server; for `serve` (the bundle's script) as it passes them
    flags=$(cat /tmp/vb/vllm-8000.flags 2>/dev/null) || flags="$RECIPE --gpu-memory-utilization 0.90 \
--max-num-seqs $MAX_SEQS --generation-config vllm --seed 0 --structured-outputs-config $SO_CONFIG ${EXTRA_FLAGS:-}"
    docs=(); [ -f .gpu/run/docs.json.gz ] && docs=(--doc-source .gpu/run/docs.json.gz)  # python -m bench gpu --build-doc-source
    python3 -m bench gpu --engine-url "${URLS-http://127.0.0.1:8000/v1}" --parts "$2" --pool .gpu/run/market.csv \
      "${docs[@]}" --server-flags "$flags" --out "${OUT_JSON:-/tmp/gpu.json}" ${BENCH_FLAGS:-}
    ;;
  profile)
    out=${PROFILE_DIR:-/tmp/profile}; mkdir -p "$out"
    spy=/tmp/tools/py_spy-0.4.3.data/scripts/py-spy
    [ -x "$spy" ] || { python3 -m zipfile -e .gpu/run/tools/py_spy-*.whl /tmp/tools && chmod +x "$spy"; }
    nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,power.draw,clocks.sm \
      --format=csv,noheader,nounits -lms 250 > "$out/gpu.csv" &
    smi=$!
    (sleep "${PROFILE_AT:-8}"; pid=$(pgrep -f "EngineCore" | head -1)
     top -b -n 2 -d 2 -w 250 > "$out/top.txt" 2>&1 &  # each process's CPU at that moment (the second frame)
     "$spy" record --pid "$pid" --duration "${PROFILE_S:-15}" --rate 100 --nonblocking --threads \
       --format speedscope --output "$out/engine.speedscope.json" > "$out/py-spy.log" 2>&1
     "$spy" dump --pid "$pid" > "$out/engine-dump.txt" 2>&1) &
    spied=$!
    date +%s.%N > "$out/start"
    bash "$0" bench "$2"
    date +%s.%N > "$out/end"
    wait "$spied" || true
    kill "$smi" || true
    ;;
  ray)
    # part ray_files: the report-file rows through ray.data.llm's vLLM processor, one engine in the job (stop the
    # servers first: the GPU is the engine's); Ray's wheel (.gpu/run/ray/*.whl, not in the bundle) installed first
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/run/ray/*.whl
    export PYTHONPATH=/tmp/site:/tmp/vb/site:$PWD PYTHONUNBUFFERED=1
    . /tmp/vb/scripts/env.sh
    python3 -m bench gpu --parts ray_files --pool .gpu/run/market.csv --ray-model "$MODEL_DIR" \
      --out "${OUT_JSON:-/tmp/gpu.json}" ${BENCH_FLAGS:-}
    ;;
  *) echo "usage: $0 setup|serve|replicas N|gpus N|stop|bench PARTS|profile PARTS|ray|eval GOLD…" >&2; exit 2 ;;
esac
