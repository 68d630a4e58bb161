#!/bin/sh
# The sentence-embedding example (apps/embed). With the published all-MiniLM-L6-v2
# weights (FLARE_PUBLISHED_WEIGHTS, which `make test` sets after
# tests/fixtures/fetch_published.py): sentence-transformers' semantic search example
# gives the nearest texts and cosines its documentation shows, in batches of any size,
# from a file or standard input (CRLF lines, the last without a newline), and --save
# writes the embeddings; a text longer than
# the model's positions is refused, naming its line. Without the weights, only the
# refusals that need no model run: no directory, no corpus, nothing to do, an empty
# corpus, a directory that is not a checkpoint.
set -u
embed=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "embed: $*"; exit 1; }
# refuses STATUS WORDS ARGS...: the program ends with STATUS, saying WORDS.
refuses() {
    want=$1 words=$2
    shift 2
    "$embed" "$@" > "$dir/out" 2>&1 < "$dir/empty"
    got=$?
    [ "$got" -eq "$want" ] || fail "$* ended with $got, not $want: $(cat "$dir/out")"
    grep -q "$words" "$dir/out" || fail "$* did not say '$words': $(cat "$dir/out")"
}
: > "$dir/empty"
printf 'A man is eating food.\n' > "$dir/one"
refuses 2 "no checkpoint directory" --corpus "$dir/one"
refuses 2 "no --corpus" "$dir"
refuses 2 "nothing to do" --corpus "$dir/one" "$dir"
refuses 1 "holds no text" --corpus - "$dir" query
refuses 1 "config.json: cannot be opened" --corpus "$dir/one" "$dir" query
refuses 1 "cannot read the corpus $dir/none" --corpus "$dir/none" "$dir" query

model=${FLARE_PUBLISHED_WEIGHTS:-}
if [ -z "$model" ]; then
    echo "FLARE_PUBLISHED_WEIGHTS is not set: the searches with the published weights are skipped"
    exit 77
fi
cat > "$dir/corpus" <<'TEXT'
A man is eating food.
A man is eating a piece of bread.
The girl is carrying a baby.

A man is riding a horse.
A woman is playing violin.
Two men pushed carts through the woods.
A man is riding a white horse on an enclosed ground.
A monkey is playing drums.
A cheetah is running behind its prey.
TEXT
cat > "$dir/want" <<'TEXT'
A man is eating pasta.
  0.7035  line 1: A man is eating food.
  0.5272  line 2: A man is eating a piece of bread.

Someone in a gorilla costume is playing a set of drums.
  0.6433  line 9: A monkey is playing drums.
  0.2564  line 6: A woman is playing violin.

A cheetah chases prey on across a field.
  0.8253  line 10: A cheetah is running behind its prey.
  0.1399  line 1: A man is eating food.
TEXT
queries="A man is eating pasta.|Someone in a gorilla costume is playing a set of drums.|A cheetah chases prey on across a field."
for batch in 32 3 1; do
    IFS='|'
    # shellcheck disable=SC2086
    "$embed" --corpus "$dir/corpus" --top 2 --batch $batch --threads 2 "$model" $queries > "$dir/got" ||
        fail "the search in batches of $batch failed"
    unset IFS
    diff "$dir/want" "$dir/got" > /dev/null || fail "batches of $batch: $(diff "$dir/want" "$dir/got")"
done
# from standard input, with CRLF line ends and no newline after the last line
awk '{ printf "%s%s", (NR > 1 ? "\r\n" : ""), $0 }' "$dir/corpus" > "$dir/crlf"
"$embed" --corpus - --top 1 --save "$dir/corpus.safetensors" "$model" "A man is eating pasta." < "$dir/crlf" \
    > "$dir/got" || fail "the search from standard input failed"
head -n 2 "$dir/want" | diff - "$dir/got" > /dev/null || fail "standard input: $(cat "$dir/got")"
grep -aq '"embeddings":{"dtype":"F32","shape":\[9,384\]' "$dir/corpus.safetensors" ||
    fail "--save did not write [9, 384] embeddings"

{ echo "short"; yes word | head -n 600 | tr '\n' ' '; echo; } > "$dir/long"
refuses 1 "line 2: 602 tokens; the model takes at most 512" --corpus "$dir/long" "$model" query
echo "embed: 3 searches, 1 from standard input, and 7 refusals passed"
