"""Log-mel throughput, side by side: Flare (bench/speech.c, built as bench_speech,
fl_speech_log_mel_batch), librosa (librosa.feature.melspectrogram per utterance on a
pool of the same number of threads, each with one BLAS thread) and PyTorch
(torch.stft of the whole batch, then the mel filterbank as a matrix product, with
torch.set_num_threads(threads); no torchaudio). All three compute the same features
(speech.h's defaults, torchaudio's: 16 kHz, n_fft 400, hop 160, hann, centre reflect
padding, 80 HTK mels without norm, power 2, ln(mel + 1e-6)) on the same audio in f32.

Each round times one batch on every side, in an order that rotates from round to
round; the ratios Flare time / reference time are taken within a round (paired) and
the median over rounds is reported, with the median throughput of each side in
seconds of audio per second.

    python bench/run_speech.py --flare build/bench_speech [--threads 2] [--utterances 16]
                               [--seconds 4] [--rounds 7] [--out FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_ops import benchmark_environment  # noqa: E402

SR, N_FFT, HOP, N_MELS = 16000, 400, 160, 80


def signals(n, seconds):
    """Speech-band audio: a few drifting tones over noise, from a fixed seed."""
    rng = np.random.default_rng(2026)
    t = np.arange(int(seconds * SR)) / SR
    out = np.empty((n, len(t)), dtype=np.float32)
    for i in range(n):
        tones = sum(np.sin(2 * np.pi * f * t * (1 + 0.05 * np.sin(2 * np.pi * 0.5 * t)))
                    for f in rng.uniform(100, 4000, 5))
        out[i] = (0.05 * tones + 0.02 * rng.standard_normal(len(t))).astype(np.float32)
    return out


class Flare:
    name = "flare"

    def __init__(self, binary, path, n, threads, env):
        self.process = subprocess.Popen([binary, "--signals", path, "--utterances", str(n), "--threads", str(threads)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def time(self):
        self.process.stdin.write("time\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit("bench_speech stopped")
        return json.loads(line)["seconds"]

    def close(self):
        self.process.stdin.close()
        self.process.wait()


class Librosa:
    name = "librosa"

    def __init__(self, x, threads):
        import librosa
        from threadpoolctl import threadpool_limits
        self.librosa, self.x, self.threads = librosa, x, threads
        self.limits = threadpool_limits(limits=1)  # one BLAS thread per worker: `threads` in all
        self.pool = ThreadPoolExecutor(threads)
        self.time()  # librosa caches its filterbank and numba compiles on first use

    def one(self, y):
        S = self.librosa.feature.melspectrogram(y=y, sr=SR, n_fft=N_FFT, hop_length=HOP, win_length=N_FFT,
                                                window="hann", center=True, pad_mode="reflect", power=2.0,
                                                n_mels=N_MELS, htk=True, norm=None)
        return np.log(S + 1e-6)

    def time(self):
        start = time.perf_counter()
        list(self.pool.map(self.one, self.x))
        return time.perf_counter() - start

    def close(self):
        self.pool.shutdown()
        self.limits.unregister()


class Torch:
    name = "torch"

    def __init__(self, x, threads):
        import torch
        import librosa
        torch.set_num_threads(threads)
        self.torch = torch
        self.x = torch.from_numpy(x)
        self.window = torch.hann_window(N_FFT)
        # torchaudio's melscale_fbanks (HTK, no norm) equals librosa's htk=True filters
        self.fb = torch.from_numpy(librosa.filters.mel(sr=SR, n_fft=N_FFT, n_mels=N_MELS, htk=True, norm=None))
        self.time()

    def time(self):
        torch = self.torch
        start = time.perf_counter()
        with torch.inference_mode():
            spec = torch.stft(self.x, N_FFT, HOP, N_FFT, self.window, center=True, pad_mode="reflect",
                              return_complex=True)
            power = spec.real.square() + spec.imag.square()
            torch.log(torch.matmul(self.fb, power) + 1e-6)
        return time.perf_counter() - start

    def close(self):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flare", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--utterances", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out")
    args = parser.parse_args()

    env = benchmark_environment(args.threads)
    for variable in ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"]:
        os.environ[variable] = env[variable]  # this process's librosa and PyTorch too
    x = signals(args.utterances, args.seconds)
    audio = args.utterances * args.seconds
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        x.tofile(f.name)
        sides = [Flare(args.flare, f.name, args.utterances, args.threads, env), Librosa(x, args.threads),
                 Torch(x, args.threads)]
        seconds = {s.name: [] for s in sides}
        ratios = {"librosa": [], "torch": []}
        for round_ in range(args.rounds):
            shift = round_ % len(sides)
            took = {s.name: s.time() for s in sides[shift:] + sides[:shift]}
            for name, t in took.items():
                seconds[name].append(t)
            for name in ratios:
                ratios[name].append(took["flare"] / took[name])
        for s in sides:
            s.close()

    report = {"threads": args.threads, "utterances": args.utterances, "seconds_each": args.seconds,
              "rounds": args.rounds, "audio_seconds": audio,
              "seconds": {k: statistics.median(v) for k, v in seconds.items()},
              "throughput": {k: audio / statistics.median(v) for k, v in seconds.items()},
              "ratio": {k: statistics.median(v) for k, v in ratios.items()},
              "ratios": ratios}
    print(f"log-mel of {args.utterances} x {args.seconds:g} s at 16 kHz, {args.threads} threads, "
          f"median of {args.rounds} paired rounds")
    for name in seconds:
        print(f"  {name:8s} {report['seconds'][name] * 1e3:9.2f} ms  {report['throughput'][name]:10.0f} s of audio/s")
    for name, r in report["ratio"].items():
        print(f"  Flare time / {name} time: {r:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
