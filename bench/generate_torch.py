"""KV-cached greedy generation in PyTorch, the twin of bench/generate.c, with the GPT of
bench/torch/gpt.py (models/gpt.c's model, same state_dict names).

    python bench/generate_torch.py --write DIR [--size cpu] [--prompt 64] [--rows 8] [--seed 1]
    python bench/generate_torch.py --weights FILE --prompt-file FILE [--batch N] [--new G]
                                   [--warmup W] [--runs R] [--threads T] [--compile]

--write initialises the model (torch.manual_seed(seed), the twin's initialisation but
for the embeddings, N(0, 0.1) and N(0, 1): see write()) and writes DIR/weights.safetensors, its state dict with the configuration in the metadata,
and DIR/prompt.safetensors, "prompt": random token ids i64 [rows, prompt]; Flare's
bench_generate reads both.

Otherwise it times generation as bench_generate does: under torch.inference_mode, a new
cache per run (per block, keys and values [N, heads, length, head_dim] grown by
torch.cat, as Flare's cache grows), the prompt fed at once and the first token picked
(prefill), then one token fed per step for the remaining G - 1 (decode), each token
taken to a Python list every step. Before timing, the prefill's logits are checked
against the twin's own forward over the prompt. --compile runs the same step function
through torch.compile with its default automatic dynamic shapes: a graph for the
prefill, one for the first step, and once the cache length has changed, one for every
length; all three compile in the warm-up, whose time is reported as compile_s. Prints one
JSON line: median prefill and decode seconds, decode tokens per second and the tokens.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent / "torch"))
import gpt  # noqa: E402  (bench/torch/gpt.py)

CONFIG_KEYS = ("vocab", "context", "layers", "heads", "embed")


def write(args):
    from safetensors.torch import save_file

    torch.manual_seed(args.seed)
    config = gpt.CONFIGS[args.size]
    model = gpt.build(args.size)
    # A GPT as initialised for training settles on one token and repeats it; larger
    # embeddings make greedy decoding move on (a new token most steps) with margins
    # between the two best logits far above the rounding differences of two libraries.
    torch.nn.init.normal_(model.tok_embed.weight, 0, args.embed_std)
    torch.nn.init.normal_(model.pos_embed.weight, 0, args.position_std)
    out = Path(args.write)
    out.mkdir(parents=True, exist_ok=True)
    metadata = {key: str(config[key]) for key in CONFIG_KEYS}
    metadata.update(format="pt", size=args.size, seed=str(args.seed))
    save_file({name: value.contiguous() for name, value in model.state_dict().items()},
              str(out / "weights.safetensors"), metadata=metadata)
    generator = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(0, config["vocab"], (args.rows, args.prompt), generator=generator, dtype=torch.int64)
    save_file({"prompt": prompt}, str(out / "prompt.safetensors"))


def load(weights):
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(weights, "pt") as f:
        metadata = f.metadata()
    config = {key: int(metadata[key]) for key in CONFIG_KEYS}
    model = gpt.GPT(dropout=0.0, **config)
    model.load_state_dict(load_file(weights), strict=True)
    model.eval()
    return model, config


def make_step(model, config):
    """feed(tokens [N, T], keys, values) -> (logits of the last position [N, V], keys,
    values): keys and values are tuples of one tensor per block, empty before the first
    call. The block is the twin's pre-norm TransformerEncoderLayer, written out so that
    it can attend to the cache: exact GELU, LayerNorm eps from its layers."""
    embed, heads = config["embed"], config["heads"]
    layers = list(model.blocks.layers)

    def split(z, n, t):
        return z.view(n, t, heads, embed // heads).transpose(1, 2)

    def feed(tokens, keys, values):
        n, t = tokens.shape
        past = keys[0].shape[2] if keys else 0
        h = model.tok_embed(tokens) + model.pos_embed.weight[past:past + t]
        new_keys, new_values = [], []
        for i, layer in enumerate(layers):
            attn = layer.self_attn
            q, k, v = F.linear(layer.norm1(h), attn.in_proj_weight, attn.in_proj_bias).split(embed, dim=2)
            q, k, v = split(q, n, t), split(k, n, t), split(v, n, t)
            if keys:
                k = torch.cat([keys[i], k], 2)
                v = torch.cat([values[i], v], 2)
            new_keys.append(k)
            new_values.append(v)
            if t == 1:
                o = F.scaled_dot_product_attention(q, k, v)  # the one query sees every key
            else:
                # Query i (position past + i) sees keys 0 .. past + i.
                mask = torch.ones(t, past + t, dtype=torch.bool).tril(past)
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            h = h + attn.out_proj(o.transpose(1, 2).reshape(n, t, embed))
            h = h + layer.linear2(F.gelu(layer.linear1(layer.norm2(h))))
        logits = F.linear(model.ln_f(h[:, -1]), model.tok_embed.weight)
        return logits, tuple(new_keys), tuple(new_values)

    return feed


def generate(feed, prompt, new_tokens):
    """The new tokens [N][G] (lists) and the prefill and decode seconds."""
    start = time.perf_counter()
    logits, keys, values = feed(prompt, (), ())
    following = logits.argmax(1, keepdim=True)
    columns = [following[:, 0].tolist()]
    fed = time.perf_counter()
    for _ in range(1, new_tokens):
        logits, keys, values = feed(following, keys, values)
        following = logits.argmax(1, keepdim=True)
        columns.append(following[:, 0].tolist())
    done = time.perf_counter()
    return [list(row) for row in zip(*columns)], fed - start, done - fed


def run(args):
    from safetensors.torch import load_file

    torch.set_num_threads(args.threads)
    model, config = load(args.weights)
    prompt = load_file(args.prompt_file)["prompt"][: args.batch].contiguous()
    if prompt.shape[0] < args.batch:
        sys.exit(f"{args.prompt_file}: 'prompt' has {prompt.shape[0]} rows, fewer than --batch {args.batch}")
    result = {"threads": torch.get_num_threads(), "batch": args.batch, "prompt": prompt.shape[1],
              "new": args.new, "warmup": args.warmup, "runs": args.runs, "version": torch.__version__,
              "mode": "compile" if args.compile else "eager"}
    with torch.inference_mode():
        feed = make_step(model, config)
        # The cache loop is the model: its prefill logits are the twin's forward's.
        reference = model(prompt)[:, -1]
        logits = feed(prompt, (), ())[0]
        if not torch.allclose(logits, reference, rtol=1e-4, atol=1e-4):
            sys.exit(f"the cache loop's prefill logits differ from the model's forward by "
                     f"{(logits - reference).abs().max().item():.3g}")
        if args.compile:
            feed = torch.compile(feed)
        started = time.perf_counter()
        for _ in range(args.warmup):
            generate(feed, prompt, args.new)
        if args.compile:
            result["compile_s"] = time.perf_counter() - started
        prefill, decode = [], []
        for _ in range(args.runs):
            tokens, p, d = generate(feed, prompt, args.new)
            prefill.append(p)
            decode.append(d)
    result["prefill_s"] = statistics.median(prefill)
    result["decode_s"] = statistics.median(decode)
    result["prefill_tok_s"] = args.batch * prompt.shape[1] / result["prefill_s"]
    result["decode_tok_s"] = args.batch * (args.new - 1) / result["decode_s"] if args.new > 1 else 0.0
    result["tokens"] = tokens
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", default=None, help="write weights.safetensors and prompt.safetensors here")
    parser.add_argument("--size", default="cpu", choices=sorted(gpt.CONFIGS))
    parser.add_argument("--prompt", type=int, default=64, help="prompt length written (--write)")
    parser.add_argument("--rows", type=int, default=8, help="prompts written (--write)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--embed-std", type=float, default=0.1, help="token embedding's init (--write)")
    parser.add_argument("--position-std", type=float, default=1.0, help="position embedding's init (--write)")
    parser.add_argument("--weights", default=None)
    parser.add_argument("--prompt-file", default=None)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="run the step through torch.compile")
    args = parser.parse_args()
    if args.write:
        if args.prompt < 1 or args.rows < 1:
            parser.error("--prompt and --rows must be positive")
        write(args)
    else:
        if not args.weights or not args.prompt_file:
            parser.error("needs --write DIR, or --weights FILE and --prompt-file FILE")
        if min(args.batch, args.new, args.warmup, args.runs, args.threads) < 1:
            parser.error("--batch, --new, --warmup, --runs and --threads must be positive")
        run(args)


if __name__ == "__main__":
    main()
