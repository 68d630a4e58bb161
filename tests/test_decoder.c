/* The decoder layer: ARPA n-gram models scored by hand and against KenLM, bad ARPA
 * files, modified Kneser-Ney estimation against an independent implementation, and
 * CTC decoding (greedy, lexicon beam search with the language model, exhaustive
 * search). Fixtures: tests/fixtures/gen_kenlm_ref.py. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "decoder/lexicon.h"
#include "flare/decoder.h"
#include "flare/meter.h"
#include "support.h"

static char tmp_path[] = "/tmp/flare_test_decoder_XXXXXX";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static fl_ngram *load_text(const char *arpa)
{
    write_file(tmp_path, arpa);
    fl_ngram *lm = NULL;
    assert_int_equal(fl_ngram_load_arpa(tmp_path, &lm), FL_OK);
    assert_non_null(lm);
    return lm;
}

/* ---- the ARPA reader and scoring --------------------------------------------------- */

static const char small_arpa[] = "\\data\\\n"
                                 "ngram 1=5\n"
                                 "ngram 2=4\n"
                                 "ngram 3=2\n"
                                 "\n"
                                 "\\1-grams:\n"
                                 "-1.0\t<unk>\n"
                                 "-99\t<s>\t-0.5\n"
                                 "-0.7\t</s>\n"
                                 "-0.6\ta\t-0.3\n"
                                 "-0.8\tb\t-0.2\n"
                                 "\n"
                                 "\\2-grams:\n"
                                 "-0.4 <s> a -0.1\n"
                                 "-0.3 a b -0.15\n"
                                 "-0.5 b </s>\n"
                                 "-0.2 b a\n"
                                 "\n"
                                 "\\3-grams:\n"
                                 "-0.05 <s> a b\n"
                                 "-0.1\ta b </s>\r\n"
                                 "\n"
                                 "\\end\\\n";

static double sentence(const fl_ngram *lm, const char *text)
{
    int32_t ids[16];
    size_t n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *w = strtok(buf, " "); w; w = strtok(NULL, " "))
        ids[n++] = fl_ngram_word_id(lm, w);
    return fl_ngram_sentence_log10(lm, ids, n);
}

/* The scores worked out by hand from the file, backoff by backoff. */
static void arpa_scores_by_hand(void **state)
{
    fl_ngram *lm = load_text(small_arpa);
    assert_int_equal(fl_ngram_order(lm), 3);
    assert_int_equal(fl_ngram_count(lm, 1), 5);
    assert_int_equal(fl_ngram_count(lm, 2), 4);
    assert_int_equal(fl_ngram_count(lm, 3), 2);
    assert_int_equal(fl_ngram_count(lm, 4), 0);
    assert_int_equal(fl_ngram_vocab_size(lm), 5);
    assert_int_equal(fl_ngram_word_id(lm, "a"), 3);
    assert_int_equal(fl_ngram_word_id(lm, "c"), -1);
    assert_string_equal(fl_ngram_word(lm, 4), "b");
    assert_null(fl_ngram_word(lm, 5));
    assert_int_equal(fl_ngram_unk(lm), 0);

    /* <s> a: 2-gram; b | <s> a: 3-gram; </s> | a b: 3-gram */
    assert_float_equal(sentence(lm, "a b"), -0.4 - 0.05 - 0.1, 1e-6);
    /* b | <s>: bow(<s>) + p(b); a | b: 2-gram; b | b a: "b a" has no backoff, "a b";
     * </s> | a b: 3-gram */
    assert_float_equal(sentence(lm, "b a b"), -0.5 - 0.8 - 0.2 - 0.3 - 0.1, 1e-6);
    /* c is <unk>: bow(<s> a) + bow(a) + p(<unk>); then </s> | <unk> backs off to p(</s>) */
    assert_float_equal(sentence(lm, "a c"), -0.4 + (-0.1 - 0.3 - 1.0) - 0.7, 1e-6);

    /* States keep the longest suffix that is an n-gram. */
    fl_ngram_state s, t;
    fl_ngram_begin_state(lm, &s);
    assert_int_equal(s.length, 1);
    assert_float_equal(fl_ngram_score(lm, &s, fl_ngram_word_id(lm, "b"), &t), -1.3, 1e-6);
    assert_int_equal(t.length, 1); /* "<s> b" is not in the file: "b" */
    assert_int_equal(t.words[0], 4);
    assert_float_equal(fl_ngram_score(lm, &t, fl_ngram_word_id(lm, "a"), &t), -0.2, 1e-6);
    assert_int_equal(t.length, 2);
    fl_ngram_state u;
    fl_ngram_null_state(&u);
    assert_float_equal(fl_ngram_score(lm, &u, fl_ngram_word_id(lm, "b"), &u), -0.8, 1e-6);
    assert_float_equal(fl_ngram_score(lm, &u, fl_ngram_word_id(lm, "a"), &u), -0.2, 1e-6);
    assert_true(fl_ngram_state_equal(&t, &u));
    /* a state not made by the API is read as far as it can hold */
    fl_ngram_state odd = {.length = 1000, .words = {3}};
    /* its last two words, <unk> <unk>: b backs off to bow(<unk>) + p(b) */
    assert_float_equal(fl_ngram_score(lm, &odd, 4, &odd), -0.8, 1e-6);
    assert_int_equal(odd.length, 1);
    odd.length = -5;
    assert_float_equal(fl_ngram_score(lm, &odd, 4, &odd), -0.8, 1e-6);

    fl_ngram_stats st;
    const char text[] = "a b\n  b\ta b \r\na c";
    assert_int_equal(fl_ngram_evaluate(lm, text, sizeof text - 1, &st), FL_OK);
    assert_int_equal(st.sentences, 3);
    assert_int_equal(st.words, 7);
    assert_int_equal(st.oov, 1);
    assert_float_equal(st.log10_prob, -4.95, 1e-5);
    assert_float_equal(st.perplexity, pow(10.0, 4.95 / 10.0), 1e-5);
    assert_float_equal(st.perplexity_without_oov, pow(10.0, 3.55 / 9.0), 1e-5);
    assert_int_equal(fl_ngram_evaluate(lm, "", 0, &st), FL_OK);
    assert_int_equal(st.sentences, 0);
    assert_float_equal(st.perplexity, 1.0, 0);
    fl_ngram_free(lm);
}

/* An order-6 model: every step of the sentence hits the longest n-gram, and a file
 * without <unk> scores unknown words -100 as KenLM does. */
static void arpa_order_six(void **state)
{
    char arpa[2048];
    int len = snprintf(arpa, sizeof arpa, "\\data\\\nngram 1=7\n");
    for (int n = 2; n <= 6; n++)
        len += snprintf(arpa + len, sizeof arpa - len, "ngram %d=1\n", n);
    len += snprintf(arpa + len, sizeof arpa - len, "\n\\1-grams:\n-99 <s>\n-1 </s>\n-1 a\n-1 b\n-1 c\n-1 d\n-1 e\n");
    const char *words[] = {"<s>", "a", "b", "c", "d", "e"};
    for (int n = 2; n <= 6; n++) {
        len += snprintf(arpa + len, sizeof arpa - len, "\n\\%d-grams:\n-0.0%d", n, n);
        for (int i = 0; i < n; i++)
            len += snprintf(arpa + len, sizeof arpa - len, " %s", words[i]);
        len += snprintf(arpa + len, sizeof arpa - len, "\n");
    }
    snprintf(arpa + len, sizeof arpa - len, "\n\\end\\\n");
    fl_ngram *lm = load_text(arpa);
    assert_int_equal(fl_ngram_order(lm), 6);
    assert_int_equal(fl_ngram_count(lm, 6), 1);
    assert_int_equal(fl_ngram_unk(lm), -1);
    assert_float_equal(sentence(lm, "a b c d e"), -0.02 - 0.03 - 0.04 - 0.05 - 0.06 - 1, 1e-6);
    assert_float_equal(sentence(lm, "a x"), -0.02 - 100 - 1, 1e-5);
    fl_ngram_free(lm);
}

static void assert_arpa_fails(const char *arpa, fl_status status, const char *contains)
{
    write_file(tmp_path, arpa);
    fl_ngram *lm = (fl_ngram *)1;
    assert_fails_status(fl_ngram_load_arpa(tmp_path, &lm), status, contains);
    assert_null(lm);
}

static void bad_arpa_files(void **state)
{
    assert_arpa_fails("", FL_ERR_VALUE, "expected the \\data\\ header, found an empty file");
    assert_arpa_fails("\n\nhello\n", FL_ERR_VALUE, "line 3: expected the \\data\\ header");
    assert_arpa_fails("\\data\\\nngram 1=x\n", FL_ERR_VALUE, "line 2: malformed count \"x\" of the 1-grams");
    assert_arpa_fails("\\data\\\nngrams 1=2\n", FL_ERR_VALUE, "line 2: expected \"ngram N=COUNT\"");
    assert_arpa_fails("\\data\\\nngram 11=2\n", FL_ERR_VALUE, "line 2: n-gram order 11 is not in [1, 10]");
    assert_arpa_fails("\\data\\\nngram 1=2\nngram 3=2\n", FL_ERR_VALUE, "line 3: the \\data\\ header gives ngram 3");
    assert_arpa_fails("\\data\\\n\n\\1-grams:\n", FL_ERR_VALUE, "declares no n-gram counts");
    assert_arpa_fails("\\data\\\nngram 1=99999999\n", FL_ERR_VALUE, "99999999 1-grams declared in a file of");
    /* counts that do not match the sections */
    assert_arpa_fails("\\data\\\nngram 1=3\n\n\\1-grams:\n-1 <s>\n-1 </s>\n\n\\end\\\n", FL_ERR_VALUE,
                      "line 8: 2 1-grams where the \\data\\ header declares 3");
    assert_arpa_fails("\\data\\\nngram 1=1\n\n\\1-grams:\n-1 <s>\n-1 </s>\n\n\\end\\\n", FL_ERR_VALUE,
                      "line 6: more 1-grams than the 1 the \\data\\ header declares");
    /* an order the header does not declare */
    assert_arpa_fails("\\data\\\nngram 1=2\n\n\\1-grams:\n-1 <s>\n-1 </s>\n\n\\2-grams:\n-1 <s> </s>\n\\end\\\n",
                      FL_ERR_VALUE, "line 8: a \\2-grams: section, but the \\data\\ header declares orders up to 1");
    assert_arpa_fails("\\data\\\nngram 1=2\nngram 2=1\n\n\\1-grams:\n-1 <s>\n-1 </s>\n\n\\3-grams:\n", FL_ERR_VALUE,
                      "line 9: a \\3-grams: section, but the \\data\\ header declares orders up to 2");
    assert_arpa_fails("\\data\\\nngram 1=2\nngram 2=1\n\n\\1-grams:\n-1 <s>\n-1 </s>\n", FL_ERR_VALUE,
                      "ends before the \\2-grams: section");
    /* no \end\ */
    assert_arpa_fails("\\data\\\nngram 1=2\n\n\\1-grams:\n-1 <s>\n-1 </s>\n", FL_ERR_VALUE, "ends without \\end\\");
    assert_arpa_fails("\\data\\\nngram 1=2\n\n\\1-grams:\n-1 <s>\n-1 </s>\n\\fin\\\n", FL_ERR_VALUE,
                      "line 7: expected \\end\\, found \"\\fin\\\"");
    /* malformed numbers and lines */
    assert_arpa_fails("\\data\\\nngram 1=2\n\n\\1-grams:\n-1x <s>\n-1 </s>\n\\end\\\n", FL_ERR_VALUE,
                      "line 5: malformed log10 probability \"-1x\"");
    assert_arpa_fails("\\data\\\nngram 1=2\nngram 2=1\n\n\\1-grams:\n-1 <s> nan\n-1 </s>\n\\end\\\n", FL_ERR_VALUE,
                      "line 6: malformed log10 backoff weight \"nan\"");
    assert_arpa_fails("\\data\\\nngram 1=2\n\n\\1-grams:\n-1 <s> -1\n-1 </s>\n\\end\\\n", FL_ERR_VALUE,
                      "line 5: a 1-gram line has a log10 probability, 1 word; found 3 fields");
    assert_arpa_fails("\\data\\\nngram 1=2\nngram 2=1\n\n\\1-grams:\n-1 <s>\n-1 </s>\n\\2-grams:\n-1 <s>\n\\end\\\n",
                      FL_ERR_VALUE, "line 9: a 2-gram line has a log10 probability, 2 words; found 2 fields");
    assert_arpa_fails("\\data\\\nngram 1=2\nngram 2=1\n\n\\1-grams:\n-1 <s>\n-1 </s>\n\\2-grams:\n-1 <s> x\n\\end\\\n",
                      FL_ERR_VALUE, "line 9: the word \"x\" is not a 1-gram");
    assert_arpa_fails("\\data\\\nngram 1=2\n\n\\1-grams:\n-1 <s>\n-1 <s>\n\\end\\\n", FL_ERR_VALUE,
                      "line 6: the 1-gram \"<s>\" is given twice");
    assert_arpa_fails("\\data\\\nngram 1=2\nngram 2=2\n\n\\1-grams:\n-1 <s>\n-1 </s>\n\\2-grams:\n-1 <s> </s>\n"
                      "-2 <s> </s>\n\\end\\\n",
                      FL_ERR_VALUE, "line 10: this 2-gram is given twice");
    assert_arpa_fails("\\data\\\nngram 1=3\nngram 2=1\nngram 3=1\n\n\\1-grams:\n-1 <s>\n-1 </s>\n-1 a\n\\2-grams:\n"
                      "-1 <s> a\n\\3-grams:\n-1 a <s> </s>\n\\end\\\n",
                      FL_ERR_VALUE, "line 13: the context of this 3-gram (its first 2 words) is not a 2-gram");
    assert_arpa_fails("\\data\\\nngram 1=2\n\n\\1-grams:\n-1 <s>\n-1 a\n\\end\\\n", FL_ERR_VALUE,
                      "the 1-grams lack </s>");
    /* the path is named */
    assert_arpa_fails("\\data", FL_ERR_VALUE, tmp_path);
    fl_ngram *lm = (fl_ngram *)1;
    assert_fails_status(fl_ngram_load_arpa("/nonexistent/flare.arpa", &lm), FL_ERR_IO, "cannot open /nonexistent");
    assert_null(lm);
    assert_fails_status(fl_ngram_load_arpa(NULL, &lm), FL_ERR_NULL, "path");
    fl_ngram_stats st;
    assert_fails_status(fl_ngram_evaluate(NULL, "a", 1, &st), FL_ERR_NULL, "lm");
    fl_ngram_free(NULL);
    assert_int_equal(fl_ngram_order(NULL), 0);
}

/* ---- modified Kneser-Ney estimation ------------------------------------------------- */

static char *read_fixture(const char *name, size_t *size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", FLARE_FIXTURES, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)n + 1);
    assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
    data[n] = '\0';
    fclose(f);
    *size = (size_t)n;
    return data;
}

/* Models of orders 1, 2, 3 and 5 estimated on fortunes of Debian's "cookie" file score
 * the held-out "fortunes" file as the independent implementation of
 * tests/fixtures/gen_kenlm_ref.py does (whose own ARPA files KenLM scores alike). */
static void kneser_ney_matches_the_reference(void **state)
{
    size_t train_size, heldout_size, ref_size;
    char *train = read_fixture("kn_train.txt", &train_size);
    char *heldout = read_fixture("kn_heldout.txt", &heldout_size);
    char *ref = read_fixture("kn_reference.txt", &ref_size);
    int checked = 0;
    for (char *line = strtok(ref, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        int order;
        long long sentences, words, oov;
        double log10_prob, perplexity;
        assert_int_equal(sscanf(line, "%d %lld %lld %lld %lf %lf", &order, &sentences, &words, &oov, &log10_prob,
                                &perplexity),
                         6);
        fl_ngram_build_options options;
        fl_ngram_build_options_default(&options);
        assert_int_equal(options.order, 3);
        options.order = order;
        assert_int_equal(fl_ngram_build_arpa(train, train_size, &options, tmp_path), FL_OK);
        fl_ngram *lm = NULL;
        assert_int_equal(fl_ngram_load_arpa(tmp_path, &lm), FL_OK);
        assert_int_equal(fl_ngram_order(lm), order);
        fl_ngram_stats st;
        assert_int_equal(fl_ngram_evaluate(lm, heldout, heldout_size, &st), FL_OK);
        assert_int_equal(st.sentences, sentences);
        assert_int_equal(st.words, words);
        assert_int_equal(st.oov, oov);
        double rel = fabs(st.perplexity - perplexity) / perplexity;
        print_message("order %d: perplexity %.6f, the reference %.6f (relative difference %.1e)\n", order,
                      st.perplexity, perplexity, rel);
        if (rel > 1e-6 || fabs(st.log10_prob - log10_prob) > 1e-6 * fabs(log10_prob))
            fail_msg("order %d: perplexity %.8f, log10 %.8f; the reference gives %.8f, %.8f", order, st.perplexity,
                     st.log10_prob, perplexity, log10_prob);
        /* p(. | h) sums to 1 over the vocabulary (but <s>), for a seen and an unseen h */
        fl_ngram_state h[2];
        fl_ngram_begin_state(lm, &h[0]);
        fl_ngram_score(lm, &h[0], fl_ngram_word_id(lm, "you"), &h[0]);
        fl_ngram_null_state(&h[1]);
        fl_ngram_score(lm, &h[1], fl_ngram_word_id(lm, "<unk>"), &h[1]);
        for (int k = 0; k < 2; k++) {
            double sum = 0;
            for (int32_t w = 0; w < fl_ngram_vocab_size(lm); w++) {
                fl_ngram_state out;
                if (strcmp(fl_ngram_word(lm, w), "<s>"))
                    sum += pow(10.0, fl_ngram_score(lm, &h[k], w, &out));
            }
            assert_float_equal(sum, 1.0, 1e-5);
        }
        fl_ngram_free(lm);
        checked++;
    }
    assert_int_equal(checked, 4);
    free(train), free(heldout), free(ref);
}

static void kneser_ney_by_hand(void **state)
{
    /* Bigrams of "a b" twice and "a" once: discounts need count-of-counts 1..4, which
     * so small a text lacks, so the fallback 0.5, 1, 1.5 is used. */
    const char text[] = "a b\na b\na\n";
    fl_ngram_build_options options = {.order = 2, .discount_fallback = 0};
    assert_fails_status(fl_ngram_build_arpa(text, sizeof text - 1, &options, tmp_path), FL_ERR_VALUE,
                        "the text is too small for order 2: its 1-grams seen once, twice, three and four times");
    options.discount_fallback = 1;
    assert_int_equal(fl_ngram_build_arpa(text, sizeof text - 1, &options, tmp_path), FL_OK);
    /* written with a new file's mode, not a temporary's 0600 */
    mode_t mask = umask(022);
    umask(mask);
    struct stat info;
    assert_int_equal(stat(tmp_path, &info), 0);
    assert_int_equal(info.st_mode & 0777, 0666 & ~mask);
    fl_ngram *lm = NULL;
    assert_int_equal(fl_ngram_load_arpa(tmp_path, &lm), FL_OK);
    /* vocabulary <unk> <s> </s> a b; adjusted unigram counts (continuation):
     * a 1 (<s> a), b 1 (a b), </s> 2 (b </s>, a </s>), <unk> 0; S = 4, gamma = 3 x 0.5 / 4
     * + 1 x 1 / 4 = 0.625, |V| = 4 */
    assert_int_equal(fl_ngram_vocab_size(lm), 5);
    assert_string_equal(fl_ngram_word(lm, 0), "<unk>");
    double g1 = (0.5 * 2 + 1.0 * 1) / 4;
    double pa = 0.5 / 4 + g1 / 4, pb = pa, peos = 1.0 / 4 + g1 / 4, punk = g1 / 4;
    assert_float_equal(pa + pb + peos + punk, 1.0, 1e-12);
    /* bigrams after a: b 2, </s> 1 (raw, the highest order); S = 3, gamma = (0.5 + 1) / 3 */
    double ga = (0.5 * 1 + 1.0 * 1) / 3;
    double p_b_a = (2 - 1.0) / 3 + ga * pb, p_eos_a = (1 - 0.5) / 3 + ga * peos;
    /* after <s>: a 3; S = 3, gamma = 1.5 / 3 */
    double gs = 1.5 / 3;
    double p_a_s = (3 - 1.5) / 3 + gs * pa;
    double p_eos_b = (2 - 1.0) / 2 + (1.0 * 1 / 2) * peos;
    assert_float_equal(sentence(lm, "a b"), log10(p_a_s) + log10(p_b_a) + log10(p_eos_b), 1e-6);
    assert_float_equal(sentence(lm, "a"), log10(p_a_s) + log10(p_eos_a), 1e-6);
    /* b after <s> was never seen: gamma(<s>) p(b); <unk> after a: gamma(a) p(<unk>) */
    assert_float_equal(sentence(lm, "b"), log10(gs * pb) + log10(p_eos_b), 1e-6);
    assert_float_equal(sentence(lm, "a zebra"), log10(p_a_s) + log10(ga * punk) + log10(peos), 1e-6);
    fl_ngram_free(lm);

    /* bad input */
    options.order = 0;
    assert_fails_status(fl_ngram_build_arpa(text, 3, &options, tmp_path), FL_ERR_VALUE, "order 0 is not in [1, 10]");
    options.order = 11;
    assert_fails_status(fl_ngram_build_arpa(text, 3, &options, tmp_path), FL_ERR_VALUE, "order 11");
    const char marked[] = "a b\nc <s> d\n";
    assert_fails_status(fl_ngram_build_arpa(marked, sizeof marked - 1, NULL, tmp_path), FL_ERR_VALUE,
                        "line 2 of the text holds <s>");
    assert_fails_status(fl_ngram_build_arpa("a\nb\0c\n", 6, NULL, tmp_path), FL_ERR_VALUE,
                        "line 2 of the text holds a NUL byte");
    options.order = 2;
    assert_fails_status(fl_ngram_build_arpa(text, 3, &options, "/nonexistent/lm.arpa"), FL_ERR_IO,
                        "cannot create /nonexistent/lm.arpa.tmp.");
    assert_fails_status(fl_ngram_build_arpa(NULL, 3, NULL, tmp_path), FL_ERR_NULL, "text");
}

/* ---- CTC decoding ------------------------------------------------------------------- */

/* Frames of probabilities: each row lists (token, probability) pairs ending with -1; the
 * mass left is spread evenly over the other tokens. Returns ln of them, [frames, C]. */
static float *emissions_of(int frames, int tokens, const double rows[][9])
{
    float *e = malloc((size_t)frames * tokens * sizeof *e);
    for (int t = 0; t < frames; t++) {
        double p[16] = {0}, used = 0;
        int named = 0;
        bool set[16] = {0};
        for (int i = 0; rows[t][i] >= 0; i += 2) {
            p[(int)rows[t][i]] = rows[t][i + 1];
            set[(int)rows[t][i]] = true;
            used += rows[t][i + 1];
            named++;
        }
        for (int k = 0; k < tokens; k++)
            e[t * tokens + k] = (float)log(set[k] ? p[k] : (1.0 - used) / (tokens - named));
    }
    return e;
}

static void add_word(fl_lexicon *lex, const char *word, const char *spelling, const char *alphabet)
{
    int64_t ids[32];
    size_t n = 0;
    for (const char *c = spelling; *c; c++)
        ids[n++] = strchr(alphabet, *c) - alphabet;
    assert_int_equal(fl_lexicon_add(lex, word, ids, n), FL_OK);
}

static void assert_words(const fl_ctc_result *r, const fl_lexicon *lex, const char *expected)
{
    char got[256] = "";
    for (int64_t i = 0; i < r->count; i++) {
        if (i)
            strcat(got, " ");
        strcat(got, fl_lexicon_word(lex, r->ids[i]));
    }
    if (strcmp(got, expected))
        fail_msg("decoded \"%s\", expected \"%s\"", got, expected);
}

/* tokens: blank, the boundary "|", letters */
static const char letters[] = "_|thecabs";

static fl_lexicon *small_lexicon(void)
{
    fl_lexicon *lex;
    assert_int_equal(fl_lexicon_new((int64_t)strlen(letters), &lex), FL_OK);
    add_word(lex, "the", "the|", letters);
    add_word(lex, "cat", "cat|", letters);
    add_word(lex, "bat", "bat|", letters);
    add_word(lex, "sat", "sat|", letters);
    assert_int_equal(fl_lexicon_size(lex), 4);
    assert_int_equal(fl_lexicon_word_id(lex, "bat"), 2);
    assert_int_equal(fl_lexicon_word_id(lex, "dog"), -1);
    return lex;
}

#define L(c) (double)(strchr(letters, c) - letters)

/* "the ?at": the acoustics say b a little more than c; greedy reads "the bat", the
 * beam search without a language model too, and with one trained on "the cat" it reads
 * "the cat". */
static void ctc_language_model_corrects_greedy(void **state)
{
    const double rows[][9] = {
        {L('t'), 0.9, -1}, {L('_'), 0.9, -1}, {L('h'), 0.9, -1}, {L('e'), 0.9, -1}, {L('|'), 0.9, -1},
        {L('b'), 0.5, L('c'), 0.4, -1}, {L('a'), 0.9, -1}, {L('t'), 0.9, -1}, {L('|'), 0.9, -1},
    };
    int frames = 9, tokens = (int)strlen(letters);
    float *e = emissions_of(frames, tokens, rows);
    fl_ctc_result r;
    assert_int_equal(fl_ctc_greedy(e, frames, tokens, 0, &r), FL_OK);
    int64_t expected[] = {2, 3, 4, 1, 7, 6, 2, 1}; /* t h e | b a t | */
    assert_int_equal(r.count, 8);
    assert_memory_equal(r.ids, expected, sizeof expected);
    double sum = 0;
    for (int t = 0; t < frames; t++)
        sum += rows[t][0] == L('b') ? log(0.5) : log(0.9);
    assert_float_equal(r.score, sum, 1e-5);
    fl_ctc_result_free(&r);

    const char text[] = "the cat sat\nthe cat ran\nthe cat ate\na bat flew\n";
    fl_ngram_build_options build = {.order = 2, .discount_fallback = 1};
    assert_int_equal(fl_ngram_build_arpa(text, sizeof text - 1, &build, tmp_path), FL_OK);
    fl_ngram *lm;
    assert_int_equal(fl_ngram_load_arpa(tmp_path, &lm), FL_OK);
    fl_lexicon *lex = small_lexicon();
    fl_ctc_beam_options o;
    fl_ctc_beam_options_default(&o);
    o.silence = 1;
    assert_int_equal(fl_ctc_beam_search(e, frames, tokens, lex, NULL, &o, &r), FL_OK);
    assert_words(&r, lex, "the bat");
    assert_float_equal(r.score, sum, 1e-5);
    fl_ctc_result_free(&r);
    assert_int_equal(fl_ctc_beam_search(e, frames, tokens, lex, lm, &o, &r), FL_OK);
    assert_words(&r, lex, "the cat");
    /* the score: emissions + ln p(the | <s>) + ln p(cat | the) + ln p(</s> | cat) */
    fl_ngram_state st;
    fl_ngram_begin_state(lm, &st);
    double lp = fl_ngram_score(lm, &st, fl_ngram_word_id(lm, "the"), &st);
    lp += fl_ngram_score(lm, &st, fl_ngram_word_id(lm, "cat"), &st);
    lp += fl_ngram_score(lm, &st, fl_ngram_word_id(lm, "</s>"), &st);
    assert_float_equal(r.score, sum - log(0.5) + log(0.4) + lp * log(10.0), 1e-5);
    fl_ctc_result_free(&r);
    /* an LM weight of 0 is no LM */
    o.lm_weight = 0;
    assert_int_equal(fl_ctc_beam_search(e, frames, tokens, lex, lm, &o, &r), FL_OK);
    assert_words(&r, lex, "the bat");
    fl_ctc_result_free(&r);

    /* The same through tensors (f32 and f64), on the backend under test. */
    fl_tensor *t32 = fl_from_data(e, FL_F32, FL_SHAPE(frames, tokens));
    fl_tensor *t64 = fl_cast(t32, FL_F64);
    o.lm_weight = 1;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(fl_ctc_beam_search_tensor(i ? t64 : t32, lex, lm, &o, &r), FL_OK);
        assert_words(&r, lex, "the cat");
        fl_ctc_result_free(&r);
        assert_int_equal(fl_ctc_greedy_tensor(i ? t64 : t32, 0, &r), FL_OK);
        assert_int_equal(r.count, 8);
        assert_memory_equal(r.ids, expected, sizeof expected);
        fl_ctc_result_free(&r);
    }
    fl_ngram_free(lm);

    /* A model giving bat probability 0 (-inf): the look-ahead of its subtree is left
     * out, and "the cat" wins whatever the acoustics. One giving every word 0 leaves
     * the empty sentence. Scores stay numbers. */
    lm = load_text("\\data\\\nngram 1=6\n\n\\1-grams:\n-99 <s>\n-0.5 </s>\n-1 the\n-2 cat\n-inf bat\n"
                   "-2 sat\n\n\\end\\\n");
    assert_int_equal(fl_ctc_beam_search(e, frames, tokens, lex, lm, &o, &r), FL_OK);
    assert_words(&r, lex, "the cat");
    assert_true(isfinite(r.score));
    fl_ctc_result_free(&r);
    fl_ngram_free(lm);
    lm = load_text("\\data\\\nngram 1=6\n\n\\1-grams:\n-99 <s>\n-0.5 </s>\n-inf the\n-inf cat\n-inf bat\n"
                   "-inf sat\n\n\\end\\\n");
    assert_int_equal(fl_ctc_beam_search(e, frames, tokens, lex, lm, &o, &r), FL_OK);
    assert_int_equal(r.count, 0);
    assert_true(isfinite(r.score));
    fl_ctc_result_free(&r);
    fl_ngram_free(lm);
    fl_lexicon_free(lex);
    free(e);
}

/* The acoustics spell "cst", which no word is: greedy gives those tokens, the lexicon
 * makes it "cat". */
static void ctc_lexicon_forbids_non_words(void **state)
{
    const double rows[][9] = {
        {L('c'), 0.9, -1}, {L('s'), 0.5, L('a'), 0.4, -1}, {L('t'), 0.9, -1}, {L('|'), 0.9, -1},
    };
    int tokens = (int)strlen(letters);
    float *e = emissions_of(4, tokens, rows);
    fl_ctc_result r;
    assert_int_equal(fl_ctc_greedy(e, 4, tokens, 0, &r), FL_OK);
    int64_t cst[] = {5, 8, 2, 1};
    assert_int_equal(r.count, 4);
    assert_memory_equal(r.ids, cst, sizeof cst);
    fl_ctc_result_free(&r);
    fl_lexicon *lex = small_lexicon();
    fl_ctc_beam_options o;
    fl_ctc_beam_options_default(&o);
    o.silence = 1;
    assert_int_equal(fl_ctc_beam_search(e, 4, tokens, lex, NULL, &o, &r), FL_OK);
    assert_words(&r, lex, "cat");
    fl_ctc_result_free(&r);
    /* trying only each frame's best token is greedy search: "cst" is no word */
    o.beam_size_token = 1;
    assert_fails_status(fl_ctc_beam_search(e, 4, tokens, lex, NULL, &o, &r), FL_ERR_VALUE, "no hypothesis");
    o.beam_size_token = 2;
    assert_int_equal(fl_ctc_beam_search(e, 4, tokens, lex, NULL, &o, &r), FL_OK);
    assert_words(&r, lex, "cat");
    fl_ctc_result_free(&r);
    fl_lexicon_free(lex);
    free(e);
}

/* A beam of one commits to the best first token, b, and ends with "ba"; a wider beam
 * keeps c and finds "cd", which scores better. */
static void ctc_beam_size_one_commits_early(void **state)
{
    const char abc[] = "_abcd";
    const double rows[][9] = {{2, 0.55, 3, 0.4, 0, 0.05, -1}, {4, 0.85, 1, 0.1, 0, 0.05, -1}};
    float *e = emissions_of(2, 5, rows);
    fl_lexicon *lex;
    assert_int_equal(fl_lexicon_new(5, &lex), FL_OK);
    add_word(lex, "ba", "ba", abc);
    add_word(lex, "cd", "cd", abc);
    fl_ctc_beam_options o;
    fl_ctc_beam_options_default(&o);
    fl_ctc_result r;
    o.beam_size = 1;
    assert_int_equal(fl_ctc_beam_search(e, 2, 5, lex, NULL, &o, &r), FL_OK);
    assert_words(&r, lex, "ba");
    assert_float_equal(r.score, log(0.55) + log(0.1), 1e-6);
    fl_ctc_result_free(&r);
    o.beam_size = 3;
    assert_int_equal(fl_ctc_beam_search(e, 2, 5, lex, NULL, &o, &r), FL_OK);
    assert_words(&r, lex, "cd");
    assert_float_equal(r.score, log(0.4) + log(0.85), 1e-6);
    fl_ctc_result_free(&r);
    /* a threshold of 0 keeps only the best of each frame, as a beam of one here */
    o.beam_size = 100;
    o.beam_threshold = 0;
    assert_int_equal(fl_ctc_beam_search(e, 2, 5, lex, NULL, &o, &r), FL_OK);
    assert_words(&r, lex, "ba");
    fl_ctc_result_free(&r);
    fl_lexicon_free(lex);
    free(e);
}

/* ---- exhaustive search over every path of a tiny vocabulary ---- */

typedef struct {
    const fl_lexicon *lex;
    const fl_ngram *lm;
    const fl_ctc_beam_options *o;
    const int64_t *seq;
    int len;
    double best;
    int64_t best_words[16];
    int best_count;
    int64_t words[16];
} exhaustive;

/* Every split of seq[pos..] into silences and spellings, each scored. */
static void split_words(exhaustive *x, int pos, int count, double score, fl_ngram_state lm_state)
{
    if (pos == x->len) {
        fl_ngram_state end;
        double total = score + x->o->lm_weight * log(10.0) *
                                   fl_ngram_score(x->lm, &lm_state, fl_ngram_word_id(x->lm, "</s>"), &end);
        if (total > x->best) {
            x->best = total;
            x->best_count = count;
            memcpy(x->best_words, x->words, (size_t)count * sizeof *x->words);
        }
        return;
    }
    if (x->seq[pos] == x->o->silence)
        split_words(x, pos + 1, count, score + x->o->silence_score, lm_state);
    int32_t node = 0;
    for (int j = pos; j < x->len; j++) {
        node = lexicon_child(x->lex, node, x->seq[j]);
        if (node < 0)
            break;
        const lexicon_node *n = &x->lex->nodes[node];
        for (int32_t i = 0; i < n->word_count; i++) {
            fl_ngram_state next;
            int32_t id = fl_ngram_word_id(x->lm, fl_lexicon_word(x->lex, n->words[i]));
            double lp = fl_ngram_score(x->lm, &lm_state, id, &next);
            x->words[count] = n->words[i];
            split_words(x, j + 1, count + 1, score + x->o->lm_weight * log(10.0) * lp + x->o->word_score, next);
        }
    }
}

static void ctc_beam_search_matches_exhaustive_search(void **state)
{
    const char abx[] = "_|ab";
    const int frames = 7, tokens = 4;
    fl_lexicon *lex;
    assert_int_equal(fl_lexicon_new(tokens, &lex), FL_OK);
    add_word(lex, "a", "a|", abx);
    add_word(lex, "A", "a|", abx); /* a homophone */
    add_word(lex, "b", "b|", abx);
    add_word(lex, "ab", "ab|", abx);
    add_word(lex, "ba", "ba|", abx);
    add_word(lex, "aa", "aa|", abx); /* needs a blank between the a's */
    add_word(lex, "x", "b", abx);    /* no boundary: "b|" is also x and a silence */
    const char text[] = "a b\nab ba a\nb a x\naa A b\nx x\nA\n";
    fl_ngram_build_options build = {.order = 2, .discount_fallback = 1};
    assert_int_equal(fl_ngram_build_arpa(text, sizeof text - 1, &build, tmp_path), FL_OK);
    fl_ngram *lm;
    assert_int_equal(fl_ngram_load_arpa(tmp_path, &lm), FL_OK);
    fl_ctc_beam_options o;
    fl_ctc_beam_options_default(&o);
    o.silence = 1;
    o.silence_score = 0.3;
    o.word_score = -0.5;
    o.lm_weight = 0.8;
    o.beam_size = 1000000;
    o.beam_threshold = INFINITY;
    float e[7 * 4];
    uint64_t seed = 12345;
    int64_t paths = 1;
    for (int t = 0; t < frames; t++)
        paths *= tokens;
    for (int trial = 0; trial < 12; trial++) {
        for (int t = 0; t < frames; t++) {
            double z[4], sum = 0;
            for (int k = 0; k < tokens; k++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                z[k] = exp(3.0 * (double)(seed >> 11) / 9007199254740992.0);
                sum += z[k];
            }
            for (int k = 0; k < tokens; k++)
                e[t * tokens + k] = (float)log(z[k] / sum);
        }
        exhaustive x = {.lex = lex, .lm = lm, .o = &o, .best = -INFINITY, .best_count = -1};
        for (int64_t p = 0; p < paths; p++) {
            int64_t seq[7], prev = -1, rest = p;
            double score = 0;
            x.len = 0;
            for (int t = 0; t < frames; t++, rest /= tokens) {
                int64_t k = rest % tokens;
                score += e[t * tokens + k];
                if (k != prev && k != o.blank)
                    seq[x.len++] = k;
                prev = k;
            }
            x.seq = seq;
            fl_ngram_state begin;
            fl_ngram_begin_state(lm, &begin);
            split_words(&x, 0, 0, score, begin);
        }
        fl_ctc_result r;
        assert_int_equal(fl_ctc_beam_search(e, frames, tokens, lex, lm, &o, &r), FL_OK);
        if (fabs(r.score - x.best) > 1e-9 * fabs(x.best) || r.count != x.best_count ||
            (r.count && memcmp(r.ids, x.best_words, (size_t)r.count * sizeof *r.ids)))
            fail_msg("trial %d: the beam search gives %.9f with %lld words, exhaustive search %.9f with %d", trial,
                     r.score, (long long)r.count, x.best, x.best_count);
        fl_ctc_result_free(&r);
    }
    fl_lexicon_free(lex);
    fl_ngram_free(lm);
}

/* End to end on real text: sentences of the held-out fortunes spelled in letters,
 * with noisy emissions (a third of the letters confused with another), decoded by
 * greedy search and by the beam search with a lexicon of the training vocabulary and
 * the Kneser-Ney trigram model of the training fortunes; word error rates by the
 * edit-distance meter. The language model must lower the error rate. */
static void ctc_decodes_fortunes(void **state)
{
    size_t train_size, heldout_size;
    char *train = read_fixture("kn_train.txt", &train_size);
    char *heldout = read_fixture("kn_heldout.txt", &heldout_size);
    assert_int_equal(fl_ngram_build_arpa(train, train_size, NULL, tmp_path), FL_OK);
    fl_ngram *lm;
    assert_int_equal(fl_ngram_load_arpa(tmp_path, &lm), FL_OK);
    static const char alphabet[] = "_|abcdefghijklmnopqrstuvwxyz'";
    const int64_t tokens = (int64_t)strlen(alphabet);
    fl_lexicon *lex;
    assert_int_equal(fl_lexicon_new(tokens, &lex), FL_OK);
    for (int32_t w = 0; w < fl_ngram_vocab_size(lm); w++) {
        const char *word = fl_ngram_word(lm, w);
        int64_t spelling[64];
        size_t n = 0;
        if (strspn(word, alphabet + 2) != strlen(word) || strlen(word) > 60)
            continue; /* <s>, punctuation */
        for (const char *c = word; *c; c++)
            spelling[n++] = strchr(alphabet, *c) - alphabet;
        spelling[n++] = 1;
        assert_int_equal(fl_lexicon_add(lex, word, spelling, n), FL_OK);
    }
    fl_ctc_beam_options o;
    fl_ctc_beam_options_default(&o);
    o.silence = 1;
    o.beam_size = 50;
    o.lm_weight = 1.0;
    fl_edit_distance_meter greedy_wer, beam_wer, beam_no_lm_wer;
    fl_edit_distance_meter_reset(&greedy_wer);
    fl_edit_distance_meter_reset(&beam_wer);
    fl_edit_distance_meter_reset(&beam_no_lm_wer);
    uint64_t seed = 7;
    int decoded = 0;
    for (char *line = strtok(heldout, "\n"); line && decoded < 40; line = strtok(NULL, "\n")) {
        /* sentences of 3 to 10 words (punctuation left out), every word in the lexicon */
        int64_t ref[16];
        int nref = 0;
        bool usable = true;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", line);
        for (char *save, *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
            if (strspn(w, alphabet + 2) != strlen(w))
                continue;
            int64_t id = fl_lexicon_word_id(lex, w);
            if (id < 0 || nref == 16) {
                usable = false;
                break;
            }
            ref[nref++] = id;
        }
        if (!usable || nref < 3 || nref > 10)
            continue;
        /* two frames a token: the letter (or |), then a blank */
        float e[2 * 160 * 29];
        int frames = 0;
        for (int i = 0; i < nref; i++) {
            const char *w = fl_lexicon_word(lex, ref[i]);
            size_t len = strlen(w);
            for (size_t c = 0; c <= len; c++) {
                int64_t truth = c < len ? strchr(alphabet, w[c]) - alphabet : 1;
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                bool confused = (seed >> 33) % 3 == 0;
                int64_t other = 2 + (int64_t)((seed >> 40) % (uint64_t)(tokens - 2));
                if (other == truth)
                    confused = false;
                for (int64_t k = 0; k < tokens; k++) {
                    double p = confused ? (k == other ? 0.5 : k == truth ? 0.3 : 0.2 / (tokens - 2))
                                        : (k == truth ? 0.7 : 0.3 / (tokens - 1));
                    e[frames * tokens + k] = (float)log(p);
                    e[(frames + 1) * tokens + k] = (float)log(k == 0 ? 0.9 : 0.1 / (tokens - 1));
                }
                frames += 2;
            }
        }
        /* greedy: the tokens cut at each | into words; a non-word counts as an error */
        fl_ctc_result r;
        assert_int_equal(fl_ctc_greedy(e, frames, tokens, 0, &r), FL_OK);
        int64_t hyp[64];
        int nhyp = 0;
        char word[128];
        size_t wl = 0;
        for (int64_t i = 0; i <= r.count; i++) {
            if (i == r.count || r.ids[i] == 1) {
                if (wl) {
                    word[wl] = '\0';
                    int64_t id = fl_lexicon_word_id(lex, word);
                    hyp[nhyp] = id >= 0 ? id : -1 - nhyp; /* a non-word: an id no reference has */
                    nhyp++;
                }
                wl = 0;
            } else if (wl < sizeof word - 1) {
                word[wl++] = alphabet[r.ids[i]];
            }
        }
        fl_ctc_result_free(&r);
        assert_int_equal(fl_edit_distance_meter_add(&greedy_wer, hyp, nhyp, ref, nref), FL_OK);
        if (fl_ctc_beam_search(e, frames, tokens, lex, lm, &o, &r) != FL_OK)
            fail_msg("%s", fl_last_error());
        assert_int_equal(fl_edit_distance_meter_add(&beam_wer, r.ids, r.count, ref, nref), FL_OK);
        fl_ctc_result_free(&r);
        assert_int_equal(fl_ctc_beam_search(e, frames, tokens, lex, NULL, &o, &r), FL_OK);
        assert_int_equal(fl_edit_distance_meter_add(&beam_no_lm_wer, r.ids, r.count, ref, nref), FL_OK);
        fl_ctc_result_free(&r);
        decoded++;
    }
    assert_int_equal(decoded, 40);
    double g = fl_edit_distance_meter_error_rate(&greedy_wer), b = fl_edit_distance_meter_error_rate(&beam_wer),
           n = fl_edit_distance_meter_error_rate(&beam_no_lm_wer);
    print_message("WER on %d held-out fortunes: greedy %.1f%%, lexicon beam %.1f%%, lexicon beam + trigram LM %.1f%%\n",
                  decoded, g, n, b);
    assert_true(n < g);
    assert_true(b < n);
    fl_lexicon_free(lex);
    fl_ngram_free(lm);
    free(train), free(heldout);
}

static void ctc_bad_input(void **state)
{
    fl_lexicon *lex = small_lexicon();
    int tokens = (int)strlen(letters);
    float e[2 * 9] = {0};
    fl_ctc_result r;
    fl_ctc_beam_options o;
    fl_ctc_beam_options_default(&o);
    assert_int_equal(o.beam_size, 100);
    assert_int_equal(o.silence, -1);
    o.blank = 9;
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, lex, NULL, &o, &r), FL_ERR_VALUE, "blank 9 is not a token");
    o.blank = 0, o.silence = 0;
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, lex, NULL, &o, &r), FL_ERR_VALUE, "silence 0 must be -1");
    o.silence = 1, o.beam_size = 0;
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, lex, NULL, &o, &r), FL_ERR_VALUE, "beam_size 0");
    o.beam_size = 10, o.beam_size_token = -1;
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, lex, NULL, &o, &r), FL_ERR_VALUE, "beam_size_token -1");
    o.beam_size_token = 0, o.beam_threshold = NAN;
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, lex, NULL, &o, &r), FL_ERR_VALUE, "beam_threshold");
    o.beam_threshold = 10, o.lm_weight = NAN;
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, lex, NULL, &o, &r), FL_ERR_VALUE, "lm_weight nan");
    o.lm_weight = 1, o.word_score = INFINITY;
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, lex, NULL, &o, &r), FL_ERR_VALUE,
                        "word_score inf and silence_score 0 must be finite");
    o.word_score = 0;
    assert_fails_status(fl_ctc_beam_search(e, 2, 8, lex, NULL, &o, &r), FL_ERR_SHAPE,
                        "emissions of 8 tokens, a lexicon of 9");
    e[12] = NAN;
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, lex, NULL, &o, &r), FL_ERR_VALUE,
                        "emissions hold NaN at frame 1, token 3");
    assert_fails_status(fl_ctc_greedy(e, 2, tokens, 0, &r), FL_ERR_VALUE, "NaN at frame 1, token 3");
    e[12] = 0;
    /* two frames without blanks cannot spell any word: no hypothesis ends at a
     * boundary */
    o.silence = -1;
    e[0] = e[9] = -INFINITY;
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, lex, NULL, &o, &r), FL_ERR_VALUE,
                        "no hypothesis of the beam ends at a word boundary after 2 frames");
    /* no frames: no words */
    assert_int_equal(fl_ctc_beam_search(NULL, 0, tokens, lex, NULL, &o, &r), FL_OK);
    assert_int_equal(r.count, 0);
    assert_null(r.ids);
    assert_int_equal(fl_ctc_greedy(NULL, 0, tokens, 0, &r), FL_OK);
    assert_int_equal(r.count, 0);
    assert_fails_status(fl_ctc_greedy(e, 2, tokens, 9, &r), FL_ERR_VALUE, "blank 9");
    assert_fails_status(fl_ctc_beam_search(e, 2, tokens, NULL, NULL, &o, &r), FL_ERR_NULL, "lex");
    fl_tensor *t3 = fl_zeros(FL_F32, FL_SHAPE(2, 3, 4));
    assert_fails_status(fl_ctc_greedy_tensor(t3, 0, &r), FL_ERR_SHAPE, "emissions f32[2, 3, 4]: expected [frames, tokens]");
    fl_tensor *ti = fl_zeros(FL_I32, FL_SHAPE(2, 9));
    assert_fails_status(fl_ctc_beam_search_tensor(ti, lex, NULL, &o, &r), FL_ERR_DTYPE, "i32[2, 9]");
    assert_fails_status(fl_ctc_greedy_tensor(NULL, 0, &r), FL_ERR_NULL, "emissions");

    /* lexicons */
    int64_t bad[] = {2, 9};
    assert_fails_status(fl_lexicon_add(lex, "x", bad, 2), FL_ERR_INDEX, "token 1 of the spelling of \"x\" is 9");
    assert_fails_status(fl_lexicon_add(lex, "x", bad, 0), FL_ERR_VALUE, "has no tokens");
    fl_lexicon *l2;
    assert_fails_status(fl_lexicon_new(0, &l2), FL_ERR_VALUE, "0 tokens");
    const char *names[] = {"_", "|", "t", "h", "e", "c", "a", "b", "s"};
    write_file(tmp_path, "the t h e |\n\ncat\tc a t |\nthe t h e\n");
    assert_int_equal(fl_lexicon_load(tmp_path, names, 9, &l2), FL_OK);
    assert_int_equal(fl_lexicon_size(l2), 2);
    assert_string_equal(fl_lexicon_word(l2, 1), "cat");
    assert_null(fl_lexicon_word(l2, 2));
    fl_lexicon_free(l2);
    write_file(tmp_path, "the t h e |\ncat c a x |\n");
    assert_fails_status(fl_lexicon_load(tmp_path, names, 9, &l2), FL_ERR_VALUE, "line 2: \"x\" is not a token");
    assert_null(l2);
    write_file(tmp_path, "the t h e |\n\ncat\n");
    assert_fails_status(fl_lexicon_load(tmp_path, names, 9, &l2), FL_ERR_VALUE,
                        "line 3: the word \"cat\" has no tokens");
    assert_fails_status(fl_lexicon_load("/nonexistent/lexicon.txt", names, 9, &l2), FL_ERR_IO, "cannot open");
    const char *twice[] = {"_", "|", "a", "b", "a"};
    assert_fails_status(fl_lexicon_load(tmp_path, twice, 5, &l2), FL_ERR_VALUE, "tokens 2 and 4 are both named \"a\"");
    /* names found by search: a lexicon over the last of many tokens */
    char many_names[300][8];
    const char *many[300];
    for (int i = 0; i < 300; i++) {
        snprintf(many_names[i], sizeof many_names[i], "t%d", (i * 7919) % 300);
        many[i] = many_names[i];
    }
    many[5] = NULL;
    write_file(tmp_path, "w t0 t299 t1\n");
    assert_int_equal(fl_lexicon_load(tmp_path, many, 300, &l2), FL_OK);
    int64_t spelling[3] = {0, 0, 0};
    for (int i = 0; i < 300; i++) {
        if (many[i] && !strcmp(many[i], "t0"))
            spelling[0] = i;
        if (many[i] && !strcmp(many[i], "t299"))
            spelling[1] = i;
        if (many[i] && !strcmp(many[i], "t1"))
            spelling[2] = i;
    }
    int32_t node = 0;
    for (int i = 0; i < 3; i++)
        node = lexicon_child(l2, node, spelling[i]);
    assert_true(node > 0);
    assert_int_equal(l2->nodes[node].word_count, 1);
    fl_lexicon_free(l2);
    fl_lexicon_free(lex);
    fl_lexicon_free(NULL);
    fl_ctc_result_free(NULL);
}

static int make_tmp(void **state)
{
    int fd = mkstemp(tmp_path);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static int remove_tmp(void **state) { return unlink(tmp_path); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(arpa_scores_by_hand),
        scoped_test(arpa_order_six),
        scoped_test(bad_arpa_files),
        scoped_test(kneser_ney_matches_the_reference),
        scoped_test(kneser_ney_by_hand),
        scoped_test(ctc_language_model_corrects_greedy),
        scoped_test(ctc_lexicon_forbids_non_words),
        scoped_test(ctc_beam_size_one_commits_early),
        scoped_test(ctc_beam_search_matches_exhaustive_search),
        scoped_test(ctc_decodes_fortunes),
        scoped_test(ctc_bad_input),
    };
    return cmocka_run_group_tests_name("decoder", tests, make_tmp, remove_tmp);
}
