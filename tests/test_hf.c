/* Hugging Face checkpoints (models/hf.c): a tiny random GPT-2 saved by transformers'
 * save_pretrained gives transformers' logits and greedy continuation
 * (tests/fixtures/gen_hf.py), and a configuration or tensor Flare's model cannot take
 * is refused naming the file and the key; a tiny random BertModel gives transformers'
 * last hidden states and mean-pooled embeddings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flare/io.h"
#include "flare/text.h"
#include "models.h"
#include "support.h"

#define GPT2_DIR FLARE_FIXTURES "/hf_gpt2"

static void gpt2_matches_transformers(void **state)
{
    (void)state;
    fl_module *m = NULL;
    gpt_config c;
    assert_int_equal(hf_load_gpt2(GPT2_DIR, &m, &c), FL_OK);
    assert_int_equal(c.vocab, 280);
    assert_int_equal(c.context, 16);
    assert_int_equal(c.layers, 2);
    assert_int_equal(c.heads, 3);
    assert_int_equal(c.embed, 24);
    assert_true(c.gelu_tanh);
    assert_true(c.layer_norm_eps == 1e-4);
    fl_variable *logits = fl_module_forward(m, fl_v_new(fixture("hf_gpt2.bin", "tokens"), false));
    assert_non_null(logits);
    assert_close(fl_v_value(logits), fixture("hf_gpt2.bin", "logits"), 1e-4, 1e-4);
    fl_tensor *generated = gpt_generate(m, fixture("hf_gpt2.bin", "prompt"), 10, &(gpt_sampling){0});
    assert_non_null(generated);
    assert_close(generated, fixture("hf_gpt2.bin", "generated"), 0, 0);
    /* Text in, text out, with the checkpoint's tokenizer.json. */
    fl_tokenizer *tok = NULL;
    assert_int_equal(fl_tokenizer_load(GPT2_DIR "/tokenizer.json", &tok), FL_OK);
    const char *prompt = "the lazy fox";
    fl_tensor *ids = fl_tokenizer_encode_tensor(tok, prompt, strlen(prompt));
    assert_non_null(ids);
    ids = fl_reshape(ids, FL_SHAPE(1, fl_dim(ids, 0)));
    assert_close(ids, fixture("hf_gpt2.bin", "text_ids"), 0, 0);
    fl_tensor *continued = gpt_generate(m, ids, 8, &(gpt_sampling){0});
    assert_close(continued, fixture("hf_gpt2.bin", "text_generated"), 0, 0);
    int64_t out[32];
    size_t count = (size_t)fl_dim(continued, 1), size = 0;
    assert_true(count <= 32);
    assert_int_equal(fl_to_host(continued, out, count * sizeof *out), FL_OK);
    char *text = NULL;
    assert_int_equal(fl_tokenizer_decode(tok, out, count, &text, &size), FL_OK);
    assert_close(fl_from_data(text, FL_U8, 1, (const int64_t[]){(int64_t)size}), fixture("hf_gpt2.bin", "text"), 0, 0);
    free(text);
    fl_tokenizer_free(tok);
    fl_module_release(m);
    assert_no_error();
}

/* A checkpoint directory of its own: config.json with the text given, and the
 * fixture's tensors changed by edit. */
typedef struct scratch {
    char dir[64];
} scratch;

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

#define GOOD_CONFIG                                                                                          \
    "{\"model_type\": \"gpt2\", \"vocab_size\": 280, \"n_positions\": 16, \"n_embd\": 24, \"n_layer\": 2, "     \
    "\"n_head\": 3, \"activation_function\": \"%s\", \"n_inner\": null, \"layer_norm_epsilon\": 1e-4%s}"

/* config.json from GOOD_CONFIG with the activation and extra keys given. */
static void write_config(const char *dir, const char *activation, const char *extra)
{
    char text[512];
    snprintf(text, sizeof text, GOOD_CONFIG, activation, extra);
    write_text(dir, "config.json", text);
}

static void remove_scratch(const char *dir)
{
    char path[128];
    const char *names[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* The fixture's tensors with name set to t (t NULL: without name), saved in dir. */
static void write_weights(const char *dir, const char *name, const fl_tensor *t)
{
    fl_tensor_map *file = NULL, *out = fl_tensor_map_create();
    assert_int_equal(fl_load_safetensors(GPT2_DIR "/model.safetensors", &file), FL_OK);
    for (size_t i = 0; i < fl_tensor_map_count(file); i++)
        if (strcmp(fl_tensor_map_name_at(file, i), name) != 0)
            assert_int_equal(fl_tensor_map_set(out, fl_tensor_map_name_at(file, i), fl_tensor_map_tensor_at(file, i)),
                             FL_OK);
    if (t)
        assert_int_equal(fl_tensor_map_set(out, name, t), FL_OK);
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(fl_save_safetensors(path, out), FL_OK);
    fl_tensor_map_free(file);
    fl_tensor_map_free(out);
}

static void refuses_what_it_cannot_compute(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_module *m = NULL;
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_IO, "config.json: cannot be opened");
    write_text(dir, "config.json", "{\"model_type\": \"gpt2\",");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE, "config.json: not valid JSON at line 1");
    write_text(dir, "config.json", "{\"model_type\": \"bert\"}");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE,
                        "config.json: \"model_type\" must be \"gpt2\", got bert");
    write_config(dir, "relu", "");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE,
                        "\"activation_function\" \"relu\" is not one Flare has");
    write_config(dir, "gelu_new", ", \"n_inner\": 50");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE, "\"n_inner\" must be null or 4 n_embd");
    write_config(dir, "gelu_new", ", \"scale_attn_by_inverse_layer_idx\": true");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE, "\"scale_attn_by_inverse_layer_idx\" must be false");
    write_text(dir, "config.json", "{\"model_type\": \"gpt2\", \"vocab_size\": 50}");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE,
                        "\"n_positions\" must be a positive integer, and it is missing");
    write_config(dir, "gelu_new", "");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_IO, "model.safetensors");
    write_weights(dir, "transformer.ln_f.bias", NULL);
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE,
                        "model.safetensors: the tensor \"transformer.ln_f.bias\" is missing");
    write_weights(dir, "transformer.h.1.attn.c_attn.weight", fl_zeros(FL_F32, FL_SHAPE(72, 24)));
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_SHAPE,
                        "\"transformer.h.1.attn.c_attn.weight\" has shape f32[72, 24], expected [24, 72]");
    write_weights(dir, "transformer.h.2.ln_1.weight", fl_ones(FL_F32, FL_SHAPE(24)));
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE,
                        "\"transformer.h.2.ln_1.weight\" is not part of the GPT-2 of config.json");
    write_weights(dir, "lm_head.weight", fl_zeros(FL_F32, FL_SHAPE(280, 24)));
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE,
                        "\"lm_head.weight\" differs from transformer.wte.weight");
    assert_null(m);
    /* An untied head equal to wte, as older transformers saved it, loads. */
    fl_tensor_map *file = NULL;
    assert_int_equal(fl_load_safetensors(GPT2_DIR "/model.safetensors", &file), FL_OK);
    write_weights(dir, "lm_head.weight", fl_tensor_map_get(file, "transformer.wte.weight"));
    fl_tensor_map_free(file);
    assert_int_equal(hf_load_gpt2(dir, &m, NULL), FL_OK);
    fl_module_release(m);
    remove_scratch(dir);
    assert_no_error();
}

#define BERT_DIR FLARE_FIXTURES "/hf_bert"

static void bert_matches_transformers(void **state)
{
    (void)state;
    fl_module *m = NULL;
    hf_bert_config c;
    assert_int_equal(hf_load_bert(BERT_DIR, &m, &c), FL_OK);
    assert_int_equal(c.hidden, 24);
    assert_int_equal(c.intermediate, 40);
    assert_true(c.layer_norm_eps == 1e-6);
    fl_tensor *ids = fixture("hf_bert.bin", "ids"), *mask = fixture("hf_bert.bin", "mask");
    fl_variable *hidden = hf_bert_forward(m, ids, fixture("hf_bert.bin", "types"), mask);
    assert_non_null(hidden);
    assert_close(fl_v_value(hidden), fixture("hf_bert.bin", "hidden"), 1e-4, 1e-4);
    assert_close(hf_bert_mean_pool(fl_v_value(hidden), mask), fixture("hf_bert.bin", "pooled"), 1e-4, 1e-4);
    fl_variable *plain = fl_module_forward(m, fl_v_new(ids, false));
    assert_non_null(plain);
    assert_close(fl_v_value(plain), fixture("hf_bert.bin", "plain"), 1e-4, 1e-4);
    assert_fails(hf_bert_forward(m, ids, NULL, T_I64(FL_SHAPE(1, 2), 1, 0)), FL_ERR_SHAPE, "like the ids");
    assert_fails(hf_bert_forward(m, T_I64(FL_SHAPE(1, 2), 1, 40), NULL, NULL), FL_ERR_VALUE,
                 "token ids must lie in [0, 40)");
    assert_fails(hf_bert_forward(m, fl_zeros(FL_I64, FL_SHAPE(1, 17)), NULL, NULL), FL_ERR_SHAPE,
                 "17 positions exceed the 16");
    fl_module_release(m);
    assert_no_error();
}

static void bert_refuses_what_it_cannot_compute(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_module *m = NULL;
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_IO, "config.json: cannot be opened");
#define BERT_CONFIG                                                                                                    \
    "{\"model_type\": \"bert\", \"vocab_size\": 40, \"hidden_size\": 24, \"num_hidden_layers\": 2, "                   \
    "\"num_attention_heads\": 3, \"intermediate_size\": 40, \"max_position_embeddings\": 16, "                         \
    "\"type_vocab_size\": 2, \"layer_norm_eps\": 1e-6%s}"
    char text[512];
    snprintf(text, sizeof text, BERT_CONFIG, ", \"hidden_act\": \"relu\"");
    write_text(dir, "config.json", text);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"hidden_act\" must be \"gelu\", got relu");
    snprintf(text, sizeof text, BERT_CONFIG, ", \"position_embedding_type\": \"relative_key\"");
    write_text(dir, "config.json", text);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"position_embedding_type\" must be \"absolute\"");
    snprintf(text, sizeof text, BERT_CONFIG, ", \"is_decoder\": true");
    write_text(dir, "config.json", text);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"is_decoder\" must be false");
    write_text(dir, "config.json", "{\"model_type\": \"gpt2\"}");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"model_type\" must be \"bert\", got gpt2");
    snprintf(text, sizeof text, BERT_CONFIG, "");
    write_text(dir, "config.json", text);
    fl_tensor_map *file = NULL, *out = NULL;
    assert_int_equal(fl_load_safetensors(BERT_DIR "/model.safetensors", &file), FL_OK);
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *name = "encoder.layer.1.attention.self.key.bias";
    out = fl_tensor_map_create();
    for (size_t i = 0; i < fl_tensor_map_count(file); i++)
        if (strcmp(fl_tensor_map_name_at(file, i), name) != 0)
            fl_tensor_map_set(out, fl_tensor_map_name_at(file, i), fl_tensor_map_tensor_at(file, i));
    assert_int_equal(fl_save_safetensors(path, out), FL_OK);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "model.safetensors: the tensor \"encoder.layer.1.attention.self.key.bias\" is missing");
    fl_tensor_map_set(out, name, fl_zeros(FL_F32, FL_SHAPE(25)));
    assert_int_equal(fl_save_safetensors(path, out), FL_OK);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_SHAPE, "has shape f32[25], expected [24]");
    fl_tensor_map_set(out, name, fl_tensor_map_get(file, name));
    fl_tensor_map_set(out, "encoder.layer.0.crossattention.self.key.bias", fl_zeros(FL_F32, FL_SHAPE(24)));
    assert_int_equal(fl_save_safetensors(path, out), FL_OK);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "\"encoder.layer.0.crossattention.self.key.bias\" is not part of the BertModel");
    assert_null(m);
    fl_tensor_map_free(file);
    fl_tensor_map_free(out);
    remove_scratch(dir);
    assert_no_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(gpt2_matches_transformers),
        scoped_test(refuses_what_it_cannot_compute),
        scoped_test(bert_matches_transformers),
        scoped_test(bert_refuses_what_it_cannot_compute),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
