"""The 7B inference server of the cold-start benchmark (docs/benchmarks.md).

  llm_server.py make DIR      writes a LLaMA-shaped 6.7B-parameter model with random
                              bf16 weights to DIR as safetensors (once; no download)
  llm_server.py serve DIR     loads DIR onto the GPU, warms up, and serves HTTP on the
                              unix socket LLM_SOCKET (default /tmp/llm.sock), and on
                              TCP at LLM_LISTEN too when it is set (such as :8000):
                                GET /token  -> {"token": id, "seconds": s}: one greedy
                                               token for a fixed prompt
                                GET /info   -> {"pid", "mode", "timings"}: seconds from process
                                               start to imports done, weights on the
                                               GPU, warm-up done
LLM_MODE picks how the server runs its forward pass, as production servers set
themselves up at start:
  plain     eager PyTorch (the default)
  compiled  torch.compile with mode "reduce-overhead" (Inductor's kernels replayed as
            CUDA graphs), compiled and captured during the warm-up
  graphs    the forward pass captured once into a CUDA graph by hand and replayed
            (no compiler needed)
The first token after a cold start or a resume is what the benchmark times; the
token is deterministic, so it also shows the model came back intact. A unix
socket keeps the server independent of the sandbox's network.
"""
import json
import os
import socketserver
import sys
import time

T0 = time.monotonic()
PROMPT = [1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203]


def make(out):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                         max_position_embeddings=2048)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    try:
        model.save_pretrained(out, max_shard_size="2GB")
    except TypeError:
        model.save_pretrained(out)
    print(json.dumps({"params": params, "dir": out, "seconds": time.monotonic() - T0}))


def load(src):
    import torch
    from transformers import LlamaForCausalLM
    try:
        return LlamaForCausalLM.from_pretrained(src, dtype=torch.bfloat16, device_map="cuda")
    except (ImportError, ValueError, TypeError):
        # Without accelerate (or an older transformers): to host, then the GPU.
        return LlamaForCausalLM.from_pretrained(src, torch_dtype=torch.bfloat16).to("cuda")


def serve(src):
    import torch
    timings = {"imports": time.monotonic() - T0}
    model = load(src)
    model.eval()
    torch.cuda.synchronize()
    timings["weightsOnGPU"] = time.monotonic() - T0
    prompt = torch.tensor([PROMPT], device="cuda")
    mode = os.environ.get("LLM_MODE", "plain")

    def forward(ids):
        return model(ids, use_cache=False).logits

    if mode == "compiled":
        step = torch.compile(forward, mode="reduce-overhead", fullgraph=False)
    elif mode == "graphs":
        static_in = prompt.clone()
        with torch.no_grad():
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    forward(static_in)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = forward(static_in)

        def step(ids):
            static_in.copy_(ids)
            graph.replay()
            return static_out
    elif mode == "plain":
        step = forward
    else:
        raise SystemExit(f"LLM_MODE {mode!r}: want plain, compiled or graphs")

    import threading
    gpu = threading.Lock()

    def token():
        # One forward pass at a time, whichever socket asked.
        with gpu, torch.no_grad():
            logits = step(prompt)
            return int(logits[0, -1].argmax())

    # Warm-up: kernels chosen and loaded; compiled and captured where the
    # mode does (reduce-overhead records its CUDA graphs on the later calls).
    for _ in range(3 if mode != "plain" else 1):
        token()
    torch.cuda.synchronize()
    timings["warmedUp"] = time.monotonic() - T0

    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            t = time.monotonic()
            if self.path == "/token":
                body = {"token": token(), "seconds": time.monotonic() - t}
            elif self.path == "/info":
                body = {"pid": os.getpid(), "mode": mode, "timings": timings}
            else:
                self.send_error(404)
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def address_string(self):
            return "unix"

        def log_message(self, *args):
            pass

    path = os.environ.get("LLM_SOCKET", "/tmp/llm.sock")
    # Bind under another name and rename: the socket appears when it serves.
    tmp = path + ".new"
    if os.path.exists(tmp):
        os.remove(tmp)
    srv = socketserver.UnixStreamServer(tmp, Handler)
    listen = os.environ.get("LLM_LISTEN", "")
    if listen:
        host, _, port = listen.rpartition(":")

        class TCPServer(socketserver.ThreadingTCPServer):
            # Many clients may come at once (held while the actor woke).
            request_queue_size = 512
            daemon_threads = True
            allow_reuse_address = True

        tcp = TCPServer((host or "0.0.0.0", int(port)), Handler)
        threading.Thread(target=tcp.serve_forever, daemon=True).start()
    os.rename(tmp, path)
    print(f"READY {json.dumps(timings)}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    {"make": make, "serve": serve}[sys.argv[1]](sys.argv[2])
