"""The 7B inference server of the cold-start benchmark (docs/benchmarks.md).

  llm_server.py make DIR      writes a LLaMA-shaped 6.7B-parameter model with random
                              bf16 weights to DIR as safetensors (once; no download)
  llm_server.py serve DIR     loads DIR onto the GPU, warms up, and serves HTTP on the
                              unix socket LLM_SOCKET (default /tmp/llm.sock):
                                GET /token  -> {"token": id, "seconds": s}: one greedy
                                               token for a fixed prompt
                                GET /info   -> {"pid", "timings"}: seconds from process
                                               start to imports done, weights on the
                                               GPU, warm-up done
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

    def token():
        with torch.no_grad():
            logits = model(prompt).logits
        return int(logits[0, -1].argmax())

    token()  # warm-up: kernels chosen and loaded
    torch.cuda.synchronize()
    timings["warmedUp"] = time.monotonic() - T0

    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            t = time.monotonic()
            if self.path == "/token":
                body = {"token": token(), "seconds": time.monotonic() - t}
            elif self.path == "/info":
                body = {"pid": os.getpid(), "timings": timings}
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
    os.rename(tmp, path)
    print(f"READY {json.dumps(timings)}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    {"make": make, "serve": serve}[sys.argv[1]](sys.argv[2])
