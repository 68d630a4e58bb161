"""Writes the seed corpus of the fuzz targets (tests/fuzz/README.md) into
tests/fuzz/corpus/<target>/: small valid files and slightly broken ones, so that the
fuzzers start from every part of each format. Python's standard library only; the
output is the same bytes on every run.

    python3 tests/fuzz/make_corpus.py
"""
import gzip
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")

# safetensors dtypes and (struct format, element size)
DTYPES = {"F64": "d", "F32": "f", "F16": "e", "BF16": "H", "I64": "q", "I32": "i", "U8": "B", "BOOL": "?"}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, values)] -> the file's bytes, laid out in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, values in tensors:
        raw = struct.pack("<%d%s" % (len(values), DTYPES[dtype]), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def with_header(text, data=b""):
    return struct.pack("<Q", len(text)) + text + data


def checkpoint(state=True, seed="7", counter="4", shapes=((2, 3), (2,), (1, 2))):
    """A checkpoint of tests/fuzz/checkpoint.c's model (Linear(3, 2), ReLU,
    Linear(2, 1, no bias)) and Adam, as fl_checkpoint_save writes it."""
    names = ["0.weight", "0.bias", "2.weight"]
    tensors = []
    for name, shape in zip(names, shapes):
        n = 1
        for d in shape:
            n *= d
        tensors.append((name, "F32", list(shape), [0.25 * i - 0.5 for i in range(n)]))
    tensors.append(("optimizer.param_groups.0.lr", "F64", [], [1e-3]))
    if state:
        for i, shape in enumerate(shapes):
            n = 1
            for d in shape:
                n *= d
            tensors.append(("optimizer.state.%d.step" % i, "F64", [], [1.0]))
            tensors.append(("optimizer.state.%d.exp_avg" % i, "F32", list(shape), [0.1] * n))
            tensors.append(("optimizer.state.%d.exp_avg_sq" % i, "F32", list(shape), [0.01] * n))
    metadata = {"flare.random_seed": seed, "flare.random_counter": counter, "epoch": "1"}
    return safetensors(tensors, metadata)


SAFETENSORS = {
    "f32": safetensors([("w", "F32", [2, 3], [1, 2, 3, 4, 5, 6])]),
    "dtypes": safetensors([("f64", "F64", [2], [1.5, -2]), ("f32", "F32", [1], [3]), ("f16", "F16", [2], [1, -1]),
                           ("bf16", "BF16", [2], [0x3f80, 0xbf80]), ("i64", "I64", [2], [-1, 2**40]),
                           ("i32", "I32", [1, 1], [7]), ("u8", "U8", [3], [0, 128, 255]),
                           ("bool", "BOOL", [2], [True, False])], {"format": "pt"}),
    "scalar_and_empty": safetensors([("s", "F32", [], [2.5]), ("e", "F32", [0, 3], []), ("z", "I64", [0], [])]),
    "metadata_only": safetensors([], {"a": "b", "escapes": "q\"\\\n\u00e9"}),
    "empty_header": with_header(b"{}"),
    "unpadded": safetensors([("x", "U8", [5], [1, 2, 3, 4, 5])], pad=False),
    "bad_dtype": with_header(b'{"x":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}}', b"\0\0"),
    "bad_json": with_header(b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]', b"\0\0\0\0"),
    "overlap": with_header(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                           b'"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}', b"\0" * 6),
    "gap": with_header(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\0\0"),
    "short_data": safetensors([("w", "F32", [2, 3], [1, 2, 3, 4, 5, 6])])[:-3],
    "big_shape": with_header(b'{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}', b"\0" * 4),
    "many_dims": with_header(b'{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}', b"\1"),
    "bool_two": with_header(b'{"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}}', b"\2"),
    "huge_length": struct.pack("<Q", 2**63) + b"{}",
    "length_only": struct.pack("<Q", 0),
}

CHECKPOINT = {
    "fresh": checkpoint(state=False),
    "trained": checkpoint(),
    "no_generator": safetensors([("0.weight", "F32", [2, 3], [0] * 6)], {"epoch": "1"}),
    "bad_seed": checkpoint(seed="12x"),
    "wrong_shape": checkpoint(shapes=((3, 2), (2,), (1, 2))),
    "missing_weight": safetensors([("0.weight", "F32", [2, 3], [0] * 6), ("0.bias", "F32", [2], [0] * 2)],
                                  {"flare.random_seed": "1", "flare.random_counter": "0"}),
}


def idx(code, fmt, shape, values):
    return struct.pack(">BBBB", 0, 0, code, len(shape)) + struct.pack(">%dI" % len(shape), *shape) + \
        struct.pack(">%d%s" % (len(values), fmt), *values)


IDX = {
    "u8_3d": idx(0x08, "B", [2, 2, 3], list(range(12))),
    "i8": idx(0x09, "b", [3], [-128, 0, 127]),
    "i16": idx(0x0B, "h", [2], [-32768, 32767]),
    "i32": idx(0x0C, "i", [1, 2], [-1, 2**31 - 1]),
    "f32": idx(0x0D, "f", [2], [1.5, -0.0]),
    "f64": idx(0x0E, "d", [1], [3.25]),
    "zero_dims": idx(0x08, "B", [], [9]),
    "empty": idx(0x08, "B", [0, 28, 28], []),
    "trailing": idx(0x08, "B", [2], [1, 2]) + b"\0",
    "truncated": idx(0x0D, "f", [4], [1, 2, 3, 4])[:-2],
    "bad_code": idx(0x0A, "B", [1], [1]),
    "huge_dims": idx(0x08, "B", [0xFFFFFFFF, 0xFFFFFFFF], [1]),
}


def gz(data):
    return gzip.compress(data, mtime=0)


def byte_chars():
    """GPT-2's characters for the 256 bytes, in byte order."""
    shown = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    chars, extra = {}, 0
    for b in range(256):
        if b in shown:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tokenizer_json(model, pre, normalizer=None, added=(), decoder=None):
    tree = {"version": "1.0", "added_tokens": list(added), "normalizer": normalizer, "pre_tokenizer": pre,
            "model": model}
    if decoder:
        tree["decoder"] = decoder
    return json.dumps(tree, ensure_ascii=False).encode()


# Llama 3's pre-tokenizer regex, as its tokenizer.json spells it.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def without_unused_bytes(vocab):
    """vocab with the tokens of the bytes valid UTF-8 never holds renamed, as GPT-NeoX's
    vocabulary lacks them."""
    unused = {byte_chars()[b] for b in (0xC0, 0xC1, *range(0xF5, 0x100))}
    return {("<unused %d>" % i if token in unused else token): i for token, i in vocab.items()}


def tokenizers():
    vocab = {c: i for i, c in enumerate(byte_chars())}
    merges = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("i", "n")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    end = {"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False, "lstrip": False,
           "rstrip": False, "normalized": False, "special": True}
    bpe = {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab, "merges": [list(m) for m in merges]}
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "##s", "cat", "##at", "a", ".", "\u4e2d"]
    wp = {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
          "max_input_chars_per_word": 100, "vocab": {w: i for i, w in enumerate(words)}}
    bert = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
            "lowercase": True}
    cls = dict(end, id=2, content="[CLS]")
    # SentencePiece's BPE (Llama 2's layout): characters, byte tokens, "\u2581" marks.
    pieces = ["<unk>", "<s>"] + ["<0x%02X>" % b for b in range(256)] + ["\u2581", "t", "h", "e", "\u2581t", "he",
                                                                        "\u2581the"]
    sentencepiece = {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
                     "vocab": {p: i for i, p in enumerate(pieces)},
                     "merges": [["\u2581", "t"], ["h", "e"], ["\u2581t", "he"]]}
    marks = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                 {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    sp_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    start = dict(end, id=1, content="<s>")
    return {
        "sentencepiece": tokenizer_json(sentencepiece, None, marks, added=[start], decoder=sp_decoder),
        "sentencepiece_no_unk": tokenizer_json(dict(sentencepiece, byte_fallback=False, unk_token=None),
                                               metaspace, decoder=dict(metaspace, type="Metaspace")),
        "bpe": tokenizer_json(bpe, level, added=[end]),
        "bpe_string_merges": tokenizer_json(dict(bpe, merges=[a + " " + b for a, b in merges]),
                                            dict(level, add_prefix_space=True)),
        "bpe_unknown_merge": tokenizer_json(dict(bpe, merges=[["x", "yz"]]), level),
        "wordpiece": tokenizer_json(wp, {"type": "BertPreTokenizer"}, bert, added=[cls]),
        "wordpiece_no_normalizer": tokenizer_json(wp, {"type": "BertPreTokenizer"}),
        "bpe_nfc": tokenizer_json(bpe, level, {"type": "NFC"}, added=[end]),
        "bpe_without_unused_bytes": tokenizer_json(dict(bpe, vocab=without_unused_bytes(vocab)), level,
                                                   {"type": "NFC"}),
        "bpe_llama3": tokenizer_json(dict(bpe, ignore_merges=True), {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
            dict(level, use_regex=False)]}, added=[end]),
        "wordpiece_untyped": tokenizer_json({k: v for k, v in wp.items() if k != "type"},
                                            {"type": "BertPreTokenizer"}, bert),
        "unigram": tokenizer_json({"type": "Unigram", "vocab": [["a", 0.0]]}, None),
        "truncated": tokenizer_json(wp, {"type": "BertPreTokenizer"}, bert)[:150],
    }


def wav(channels, rate, bits, samples, fmt_tag=None, data_size=None):
    """A RIFF WAVE file: PCM of 8, 16 or 32 bits, or IEEE float (bits 32, fmt_tag 3),
    interleaved samples in [-1, 1]; data_size overrides the data chunk's length."""
    tag = fmt_tag or 1
    if tag == 3:
        data = struct.pack("<%df" % len(samples), *samples)
    elif bits == 8:
        data = bytes(int(128 + 127 * x) for x in samples)
    else:
        scale = 2 ** (bits - 1) - 1
        data = struct.pack("<%d%s" % (len(samples), "h" if bits == 16 else "i"), *(int(scale * x) for x in samples))
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    size = len(data) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", size) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def audio():
    """Seeds of the audio target: WAVs of each sample format, several channels and
    rates (so that the target's resampling runs), and broken ones."""
    import math
    tone = [0.5 * math.sin(2 * math.pi * 440 * i / 8000) for i in range(600)]
    stereo = [x for pair in zip(tone, tone[::-1]) for x in pair]
    return {
        "pcm16_8k.wav": wav(1, 8000, 16, tone),
        "pcm8_stereo.wav": wav(2, 11025, 8, stereo),
        "pcm32_16k.wav": wav(1, 16000, 32, tone),
        "float_stereo_44k.wav": wav(2, 44100, 32, stereo, fmt_tag=3),
        "no_samples.wav": wav(1, 16000, 16, []),
        "data_overstated.wav": wav(1, 16000, 16, tone, data_size=4 * len(tone)),
        "header_only.wav": wav(1, 16000, 16, tone)[:44],
        "rate_zero.wav": wav(1, 0, 16, tone[:50]),
    }


ARPA_SMALL = (b"\\data\\\nngram 1=5\nngram 2=4\nngram 3=2\n\n"
              b"\\1-grams:\n-1.0\t<unk>\n-99\t<s>\t-0.5\n-0.7\t</s>\n-0.6\ta\t-0.3\n-0.8\tb\t-0.2\n\n"
              b"\\2-grams:\n-0.4 <s> a -0.1\n-0.3 a b -0.15\n-0.5 b </s>\n-0.2 b a\n\n"
              b"\\3-grams:\n-0.05 <s> a b\n-0.1\ta b </s>\r\n\n\\end\\\n")


def arpa():
    """ARPA language models (fl_ngram_load_arpa): a trigram model with backoffs, one
    of order 4 without <unk>, and broken ones (counts off, no \\end\\, a bad number,
    an undeclared order, a context missing)."""
    order4 = (b"\\data\\\nngram 1=4\nngram 2=2\nngram 3=1\nngram 4=1\n\n\\1-grams:\n-99 <s> -0.1\n-1 </s>\n"
              b"-0.5 x -0.2\n-0.6 y 0\n\n\\2-grams:\n-0.1 <s> x -0.3\n-0.2 x y\n\n\\3-grams:\n-0.3 <s> x y\n\n"
              b"\\4-grams:\n-0.01 <s> x y </s>\n\n\\end\\\n")
    return {
        "trigram": ARPA_SMALL,
        "order4": order4,
        "count_off": ARPA_SMALL.replace(b"ngram 2=4", b"ngram 2=3"),
        "no_end": ARPA_SMALL[:-6],
        "bad_number": ARPA_SMALL.replace(b"-0.15", b"-0.1.5"),
        "undeclared_order": order4.replace(b"ngram 4=1\n", b""),
        "missing_context": order4.replace(b"-0.3 <s> x y", b"-0.3 y x y"),
    }


def lexicons():
    """wav2letter lexicons over the tokens _ | a b c d e (tests/fuzz/lexicon.c): words
    spelled with and without the boundary, homophones, a doubled letter, and broken
    ones (an unknown token, a word without tokens)."""
    return {
        "words": b"ab a b |\nba b a |\ncab c a b |\nadd a d d |\n",
        "homophones": b"ab\ta b |\nAB\ta b |\nab a b\r\n\nb b\n",
        "unknown_token": b"ab a b |\nax a x |\n",
        "no_tokens": b"ab a b |\nlonely\n",
    }


def hf_configs():
    """config.json files for the hf_config target (tests/fuzz/hf_config.c), which puts
    each beside both fixtures' weights: the fixtures' own, each with a key that Flare
    reads or refuses changed, another architecture, and broken JSON."""
    def fixture(name):
        with open(os.path.join(FIXTURES, name, "config.json"), "rb") as f:
            return json.loads(f.read())

    def dump(config):
        return json.dumps(config, sort_keys=True).encode()

    gpt, bert = fixture("hf_gpt2"), fixture("hf_bert")
    return {
        "gpt2": dump(gpt),
        "bert": dump(bert),
        "gpt2_exact_gelu": dump(dict(gpt, activation_function="gelu")),
        "gpt2_relu": dump(dict(gpt, activation_function="relu")),
        "gpt2_inner": dump(dict(gpt, n_inner=4 * gpt["n_embd"] + 1)),
        "gpt2_wide": dump(dict(gpt, n_embd=24000000)),
        "gpt2_heads": dump(dict(gpt, n_head=5)),
        "gpt2_tiny_eps": dump(dict(gpt, layer_norm_epsilon=1e-300)),
        "bert_decoder": dump(dict(bert, is_decoder=True)),
        "bert_relative": dump(dict(bert, position_embedding_type="relative_key")),
        "bert_layers": dump(dict(bert, num_hidden_layers=3)),
        "bert_gelu_new": dump(dict(bert, hidden_act="gelu_new")),
        "llama": dump({"model_type": "llama", "hidden_size": 24}),
        "truncated": dump(gpt)[:100],
        "not_object": b"[1, 2, 3]",
    }


def bpe_texts():
    """Training texts for the bpe_train target (tests/fuzz/bpe_train.c), whose first
    byte sets the number of merges: English, repeated letters, UTF-8 of several
    scripts, bytes that are not UTF-8, spaces and newlines alone, and nothing."""
    return {
        "english": b"\x40the cat sat on the mat; the cat's hat is on the mat.\nThe end.\n" * 3,
        "repeats": b"\xffaaaaaaaaaaaaaaaaabababababababab aaaa aaaa bbbb",
        "utf8": "\x10caf\u00e9 \u4e2d\u6587 \u0645\u0631\u062d\u0628\u0627 \U0001f600 na\u00efve".encode(),
        "bytes": bytes(range(256)) + bytes(range(255, -1, -3)),
        "whitespace": b"\x20  \t\t\n\n\r\n   \n",
        "empty": b"",
    }


def write(target, files):
    folder = os.path.join(HERE, "corpus", target)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for name, data in sorted(files.items()):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


def main():
    files = dict(SAFETENSORS)
    with open(os.path.join(FIXTURES, "io_reference.safetensors"), "rb") as f:
        files["reference"] = f.read()  # written by the reference implementation
    write("safetensors", files)
    write("checkpoint", CHECKPOINT)
    files = dict(IDX)
    for name in ("u8_3d", "f64", "truncated"):
        files[name + ".gz"] = gz(IDX[name])
    files["two_members.gz"] = gz(IDX["i32"][:7]) + gz(IDX["i32"][7:])
    files["truncated_stream.gz"] = gz(IDX["u8_3d"])[:-6]
    files["bad_crc.gz"] = gz(IDX["i8"])[:-8] + b"\0\0\0\0" + gz(IDX["i8"])[-4:]
    write("idx", files)
    write("idx_gzip", IDX)  # the target gzips its input
    write("tokenizer", tokenizers())
    write("audio", audio())
    write("arpa", arpa())
    write("lexicon", lexicons())
    write("hf_config", hf_configs())
    write("bpe_train", bpe_texts())


if __name__ == "__main__":
    main()
