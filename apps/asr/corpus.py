"""Synthesises the spoken corpus apps/asr trains and tests on (`make speech-data`).

    python3 apps/asr/corpus.py --out DIR [--seed 1] [--utterances 6000] [--jobs 2]

Sentences of the kinds a voice assistant hears (numbers, dates, times, short commands)
and short lines of real English text (Debian's fortunes), spoken by espeak-ng in many
voices: its English accents times its voice variants, at varied speeds, pitches and
word gaps. sox resamples to 16 kHz mono and adds reverberation to some; noise (white,
pink or brown, from beds sox makes once) is mixed in at an SNR drawn from 5 to 30 dB,
or none. The split is by voice variant: a variant heard in dev or test is never heard
in training, whatever the accent.

DIR receives:
    audio/{train,dev,test}/NNNNNN.flac
    train.tsv, dev.tsv, test.tsv   path (relative to DIR), duration (s), transcript
    lm.txt                         text for the n-gram LM: the training transcripts and
                                   as many more sentences of the same generator
    lexicon.txt                    every word of the corpus and lm.txt, spelled in letters
    tokens.txt                     the token set: "|" (word boundary), ', a to z
    corpus.json                    the options, the voices of each split, counts, hours,
                                   the seconds it took
Transcripts are lowercase letters, apostrophes and single spaces; the text spoken is
the transcript itself (numbers written as words), so audio and text agree.

The same options give the same corpus: everything random comes from one seed, and sox
runs in repeatable mode (-R). An existing DIR/corpus.json of the same options means the
corpus is there, and nothing is done. Only the Python standard library is used.
"""
import argparse
import array
import concurrent.futures
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:  # C speed for mixing; the standard library has it up to Python 3.12
        import audioop
    except ImportError:
        audioop = None

RATE = 16000
ACCENTS = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029",
           "en-us-nyc"]
# Whispered variants have no voicing to hear; they are left out of every split.
UNVOICED = {"whisper", "whisperf"}
NOISES = ["whitenoise", "pinknoise", "brownnoise"]
NOISE_SECONDS = 60
FORTUNE_FILES = ["fortunes", "computers", "science", "wisdom", "work", "people", "literature"]

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth",
            "twelve": "twelfth", "twenty": "twentieth", "thirty": "thirtieth"}
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
ROOMS = ["kitchen", "bedroom", "living room", "bathroom", "office", "garage", "hallway", "garden"]
DEVICES = ["lights", "heater", "fan", "television", "radio", "music", "alarm", "oven", "lamp"]
PEOPLE = ["mom", "dad", "alice", "bob", "the office", "my sister", "grandma", "the doctor", "john", "emma"]
GENRES = ["jazz", "rock", "classical music", "the news", "some blues", "folk songs", "the radio"]
PLACES = ["the station", "the airport", "home", "work", "the nearest pharmacy", "the museum", "the park"]


def number_words(n):
    """n (0 to 999999) in words, as spoken: "four hundred twenty seven"."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else " " + ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + number_words(rest))
    rest = n % 1000
    return number_words(n // 1000) + " thousand" + ("" if rest == 0 else " " + number_words(rest))


def ordinal_words(n):
    words = number_words(n).split()
    last = words[-1]
    if last in ORDINALS:
        words[-1] = ORDINALS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def year_words(y):
    if 2000 <= y < 2010:
        return number_words(y)
    return number_words(y // 100) + " " + (number_words(y % 100) if y % 100 >= 10 else "oh " + ONES[y % 100])


def time_words(rng):
    hour, minute = rng.randint(1, 12), rng.choice([0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, rng.randint(1, 59)])
    form = rng.random()
    if minute == 15 and form < 0.5:
        spoken = "quarter past " + ONES[hour]
    elif minute == 30 and form < 0.5:
        spoken = "half past " + ONES[hour]
    elif minute == 0:
        spoken = ONES[hour] + " o'clock"
    else:
        spoken = ONES[hour] + " " + (number_words(minute) if minute >= 10 else "oh " + ONES[minute])
    return spoken + rng.choice(["", "", " in the morning", " in the evening", " at night"])


def sentence(rng, lines):
    kind = rng.random()
    if kind < 0.16:
        n = rng.choice([rng.randint(0, 99), rng.randint(100, 999), rng.randint(1000, 99999)])
        return rng.choice(["the number is {}", "{}", "it costs {} dollars", "add {} to the list", "room {}",
                           "flight {} is delayed", "my code is {}", "about {} people came"]).format(number_words(n))
    if kind < 0.28:
        digits = " ".join(ONES[rng.randint(0, 9)] for _ in range(rng.randint(3, 7)))
        return rng.choice(["call {}", "dial {}", "the pin is {}", "{}"]).format(digits)
    if kind < 0.42:
        day = ordinal_words(rng.randint(1, 28 if rng.random() < 0.3 else 31))
        month, year = rng.choice(MONTHS), year_words(rng.randint(1950, 2030))
        return rng.choice(["{m} {d}", "the {d} of {m}", "{m} {d} {y}", "on {w} the {d}", "born on {m} {d} {y}",
                           "the meeting is on {w} {m} {d}"]).format(m=month, d=day, y=year, w=rng.choice(DAYS))
    if kind < 0.56:
        return rng.choice(["wake me up at {t}", "set an alarm for {t}", "the train leaves at {t}", "it is {t}",
                           "remind me at {t} on {w}", "meet me at {t}"]).format(t=time_words(rng), w=rng.choice(DAYS))
    if kind < 0.80:
        minutes = number_words(rng.choice([1, 2, 3, 5, 10, 15, 20, 25, 30, 45, 90]))
        return rng.choice([
            "turn on the {r} {d}", "turn off the {d} in the {r}", "switch the {r} {d} off", "call {p}",
            "play {g}", "stop the {d}", "set a timer for {n} minutes", "what is the weather like on {w}",
            "how long does it take to get to {l}", "navigate to {l}", "send a message to {p}", "open the {r} door",
            "dim the {r} lights", "turn the volume up", "turn the volume down", "what time is it",
            "cancel my alarm", "add milk and eggs to the shopping list", "read me the news",
            "is it going to rain on {w}",
        ]).format(r=rng.choice(ROOMS), d=rng.choice(DEVICES), p=rng.choice(PEOPLE), g=rng.choice(GENRES),
                  n=minutes, w=rng.choice(DAYS), l=rng.choice(PLACES))
    return rng.choice(lines)


def fortune_lines(directory):
    """Short lines of real text: 3 to 9 words of letters and apostrophes."""
    lines = set()
    for name in FORTUNE_FILES:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for raw in f:
                if any(c.isdigit() for c in raw):
                    continue
                text = re.sub(r"[^a-z' ]+", " ", raw.lower().replace("\u2019", "'"))
                words = [w.strip("'") for w in text.split()]
                words = [w for w in words if w]
                if 3 <= len(words) <= 9:
                    lines.add(" ".join(words))
    if not lines:
        sys.exit("corpus.py: no text in %s: install Debian's fortunes package" % directory)
    return sorted(lines)


def variants():
    out = subprocess.run(["espeak-ng", "--voices=variant"], capture_output=True, text=True, check=True).stdout
    names = sorted({line.split()[4].split("/")[-1] for line in out.splitlines()[1:] if len(line.split()) >= 5})
    return [v for v in names if v not in UNVOICED]


def make_noise(directory):
    beds = []
    for kind in NOISES:
        path = os.path.join(directory, kind + ".raw")
        subprocess.run(["sox", "-R", "-n", "-r", str(RATE), "-b", "16", "-c", "1", "-e", "signed", "-t", "raw", path,
                        "synth", str(NOISE_SECONDS), kind], check=True)
        beds.append(path)
    return beds


def rms(samples):
    if audioop:
        return audioop.rms(samples.tobytes(), 2)
    return math.sqrt(math.fsum(x * x for x in samples) / max(len(samples), 1))


def render(job):
    """Speaks one utterance into job["path"]; returns its duration in seconds."""
    spoken = subprocess.run(
        ["espeak-ng", "-v", "%s+%s" % (job["accent"], job["variant"]), "-s", str(job["speed"]), "-p", str(job["pitch"]),
         "-g", str(job["gap"]), "--stdout", job["text"]], capture_output=True, check=True).stdout
    effects = ["reverb", str(job["reverb"])] if job["reverb"] else []
    raw = subprocess.run(["sox", "-R", "-t", "wav", "-", "-t", "raw", "-r", str(RATE), "-b", "16", "-c", "1", "-e",
                          "signed", "-"] + effects, input=spoken, capture_output=True, check=True).stdout
    speech = array.array("h", raw[: len(raw) // 2 * 2])
    if job["snr"] is not None:
        noise = array.array("h")
        with open(job["noise"], "rb") as f:
            f.seek(job["noise_offset"] * 2)
            noise.frombytes(f.read(len(speech) * 2))
        scale = rms(speech) / max(rms(noise), 1e-9) / (10 ** (job["snr"] / 20))
        if audioop:
            speech = array.array("h", audioop.add(speech.tobytes(), audioop.mul(noise.tobytes(), 2, scale), 2))
        else:
            speech = array.array("h", (max(-32768, min(32767, int(s + scale * n))) for s, n in zip(speech, noise)))
    subprocess.run(["sox", "-R", "-t", "raw", "-r", str(RATE), "-b", "16", "-c", "1", "-e", "signed", "-",
                    job["path"]], input=speech.tobytes(), check=True)
    return len(speech) / RATE


def plan(options, lines, voices):
    rng = random.Random(options["seed"])
    names = list(voices)
    rng.shuffle(names)
    held = max(2, len(names) // 7)
    splits = {"test": names[:held], "dev": names[held:held + held // 2], "train": names[held + held // 2:]}
    counts = {"test": options["utterances"] // 10, "dev": options["utterances"] // 20}
    counts["train"] = options["utterances"] - counts["test"] - counts["dev"]
    jobs = []
    for split in ("train", "dev", "test"):
        for i in range(counts[split]):
            noisy = rng.random() < 0.6
            jobs.append({
                "split": split, "index": i, "text": sentence(rng, lines), "accent": rng.choice(ACCENTS),
                "variant": rng.choice(splits[split]), "speed": rng.randint(130, 210), "pitch": rng.randint(20, 80),
                "gap": rng.choice([0, 0, 1, 2, 4]), "reverb": rng.choice([0, 0, 0, 20, 40, 60]),
                "snr": rng.uniform(5, 30) if noisy else None, "noise_kind": rng.randrange(len(NOISES)),
                "noise_offset": rng.randrange((NOISE_SECONDS - 15) * RATE),
            })
    lm = [sentence(rng, lines) for _ in range(counts["train"])]
    return splits, jobs, lm


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--utterances", type=int, default=6000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--fortunes", default="/usr/share/games/fortunes")
    args = parser.parse_args()
    options = {"seed": args.seed, "utterances": args.utterances, "version": 1}
    meta_path = os.path.join(args.out, "corpus.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            if json.load(f).get("options") == options:
                print("corpus.py: %s is there already" % args.out)
                return
    if args.utterances < 40:
        sys.exit("corpus.py: --utterances must be at least 40")
    started = time.monotonic()
    lines = fortune_lines(args.fortunes)
    splits, jobs, lm = plan(options, lines, variants())
    os.makedirs(args.out, exist_ok=True)
    for split in splits:
        os.makedirs(os.path.join(args.out, "audio", split), exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        beds = make_noise(scratch)
        for job in jobs:
            job["noise"] = beds[job["noise_kind"]]
            job["path"] = os.path.join(args.out, "audio", job["split"], "%06d.flac" % job["index"])
        durations = [0.0] * len(jobs)
        with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for k, seconds in enumerate(pool.map(render, jobs, chunksize=16)):
                durations[k] = seconds
                if k % 500 == 0 or k + 1 == len(jobs):
                    print("\rcorpus.py: %d/%d utterances" % (k + 1, len(jobs)), end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    words = set()
    hours = {}
    for split in splits:
        rows = [(os.path.relpath(j["path"], args.out), d, j["text"]) for j, d in zip(jobs, durations)
                if j["split"] == split]
        hours[split] = sum(r[1] for r in rows) / 3600
        with open(os.path.join(args.out, split + ".tsv.tmp"), "w") as f:
            for path, seconds, text in rows:
                f.write("%s\t%.3f\t%s\n" % (path, seconds, text))
                words.update(text.split())
        os.replace(os.path.join(args.out, split + ".tsv.tmp"), os.path.join(args.out, split + ".tsv"))
    train_text = [j["text"] for j in jobs if j["split"] == "train"]
    for text in lm:
        words.update(text.split())
    files = {
        "lm.txt": "".join(t + "\n" for t in train_text + lm),
        "lexicon.txt": "".join("%s\t%s |\n" % (w, " ".join(w)) for w in sorted(words)),
        "tokens.txt": "|\n'\n" + "".join(chr(c) + "\n" for c in range(ord("a"), ord("z") + 1)),
    }
    for name, text in files.items():
        with open(os.path.join(args.out, name + ".tmp"), "w") as f:
            f.write(text)
        os.replace(os.path.join(args.out, name + ".tmp"), os.path.join(args.out, name))
    meta = {"options": options, "voices": splits, "accents": ACCENTS,
            "utterances": {s: sum(1 for j in jobs if j["split"] == s) for s in splits},
            "hours": {s: round(h, 3) for s, h in hours.items()}, "words": len(words),
            "seconds": round(time.monotonic() - started, 1), "jobs": args.jobs}
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(meta_path + ".tmp", meta_path)
    print("corpus.py: %s: %s utterances, %s hours, made in %.0f s on %d jobs" %
          (args.out, meta["utterances"], meta["hours"], meta["seconds"], args.jobs))


if __name__ == "__main__":
    main()
