/* Hugging Face checkpoints (models/hf.c): a tiny random GPT-2 saved by transformers'
 * save_pretrained gives transformers' logits and greedy continuation
 * (tests/fixtures/gen_hf.py), and a configuration or tensor Flare's model cannot take
 * is refused naming the file and the key; tiny random BertModel, RobertaModel and
 * DistilBertModel give transformers' last hidden states and mean-pooled embeddings. */
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
    /* Loading draws nothing from the generator: the model is built uninitialized. */
    fl_manual_seed(3);
    fl_tensor *next = fl_rand(FL_F32, FL_SHAPE(4));
    fl_manual_seed(3);
    assert_int_equal(hf_load_gpt2(GPT2_DIR, &m, &c), FL_OK);
    assert_close(fl_rand(FL_F32, FL_SHAPE(4)), next, 0, 0);
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
    write_text(dir, "config.json", "[1, 2, 3]"); /* JSON, but not an object */
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE, "config.json: is not a JSON object");
    write_config(dir, "relu", "");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE,
                        "\"activation_function\" \"relu\" is not one Flare has");
    write_config(dir, "gelu_new", ", \"n_inner\": 50");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE, "\"n_inner\" must be null or 4 n_embd");
    write_config(dir, "gelu_new", ", \"scale_attn_by_inverse_layer_idx\": true");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE, "\"scale_attn_by_inverse_layer_idx\" must be false");
    /* A GPTQ checkpoint of gpt2 as its config.json names it: packed 4-bit weights. */
    write_config(dir, "gelu_new", ", \"quantization_config\": {\"bits\": 4, \"quant_method\": \"gptq\"}");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE,
                        "\"quantization_config\" (gptq) names a quantized checkpoint");
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


/* ---- the layouts published checkpoints come in ---- */

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    return text;
}

static void save_map(const char *dir, const char *name, const fl_tensor_map *map)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(fl_save_safetensors(path, map), FL_OK);
}

static void remove_files(const char *dir, const char *const *names, int count)
{
    char path[128];
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void gpt2_logits_match(const char *dir)
{
    fl_module *m = NULL;
    assert_int_equal(hf_load_gpt2(dir, &m, NULL), FL_OK);
    fl_variable *logits = fl_module_forward(m, fl_v_new(fixture("hf_gpt2.bin", "tokens"), false));
    assert_non_null(logits);
    assert_close(fl_v_value(logits), fixture("hf_gpt2.bin", "logits"), 1e-4, 1e-4);
    fl_module_release(m);
}

/* The gpt2 repository's own file: names without "transformer.", and each block's
 * causal-mask buffers attn.bias and attn.masked_bias saved beside the weights. */
static void gpt2_loads_the_published_layout(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_text(dir, "config.json", read_text(GPT2_DIR "/config.json"));
    fl_tensor_map *file = NULL, *out = fl_tensor_map_create();
    assert_int_equal(fl_load_safetensors(GPT2_DIR "/model.safetensors", &file), FL_OK);
    const char *prefix = "transformer.";
    for (size_t i = 0; i < fl_tensor_map_count(file); i++) {
        const char *name = fl_tensor_map_name_at(file, i);
        assert_int_equal(strncmp(name, prefix, strlen(prefix)), 0);
        fl_tensor_map_set(out, name + strlen(prefix), fl_tensor_map_tensor_at(file, i));
    }
    for (int layer = 0; layer < 2; layer++) {
        char name[64];
        snprintf(name, sizeof name, "h.%d.attn.bias", layer);
        fl_tensor_map_set(out, name, fl_tril(fl_ones(FL_F32, FL_SHAPE(1, 1, 16, 16)), 0));
        snprintf(name, sizeof name, "h.%d.attn.masked_bias", layer);
        fl_tensor_map_set(out, name, fl_scalar(-1e4, FL_F32));
    }
    save_map(dir, "model.safetensors", out);
    gpt2_logits_match(dir);
    fl_tensor_map_free(file);
    fl_tensor_map_free(out);
    remove_files(dir, (const char *const[]){"config.json", "model.safetensors"}, 2);
    assert_no_error();
}

/* A checkpoint split into shards by model.safetensors.index.json, as transformers
 * saves one over its max_shard_size; and the ways such an index can be damaged. */
static void gpt2_loads_a_sharded_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_text(dir, "config.json", read_text(GPT2_DIR "/config.json"));
    fl_tensor_map *file = NULL, *shards[2] = {fl_tensor_map_create(), fl_tensor_map_create()};
    assert_int_equal(fl_load_safetensors(GPT2_DIR "/model.safetensors", &file), FL_OK);
    char index[8192];
    int n = snprintf(index, sizeof index, "{\"metadata\": {}, \"weight_map\": {");
    for (size_t i = 0; i < fl_tensor_map_count(file); i++) {
        const char *name = fl_tensor_map_name_at(file, i);
        fl_tensor_map_set(shards[i % 2], name, fl_tensor_map_tensor_at(file, i));
        n += snprintf(index + n, sizeof index - (size_t)n, "%s\"%s\": \"model-0000%zu-of-00002.safetensors\"",
                      i ? ", " : "", name, i % 2 + 1);
    }
    snprintf(index + n, sizeof index - (size_t)n, "}}");
    save_map(dir, "model-00001-of-00002.safetensors", shards[0]);
    save_map(dir, "model-00002-of-00002.safetensors", shards[1]);
    write_text(dir, "model.safetensors.index.json", index);
    gpt2_logits_match(dir);

    fl_module *m = NULL;
    fl_tensor_map_set(shards[1], "unlisted", fl_zeros(FL_F32, FL_SHAPE(1)));
    const char *dropped = fl_tensor_map_name_at(file, 1);
    fl_tensor_map *short_shard = fl_tensor_map_create();
    for (size_t i = 0; i < fl_tensor_map_count(shards[1]); i++)
        if (strcmp(fl_tensor_map_name_at(shards[1], i), dropped) != 0)
            fl_tensor_map_set(short_shard, fl_tensor_map_name_at(shards[1], i), fl_tensor_map_tensor_at(shards[1], i));
    save_map(dir, "model-00002-of-00002.safetensors", short_shard);
    char expected[256];
    snprintf(expected, sizeof expected, "the tensor \"%s\" is listed in model-00002-of-00002.safetensors but missing",
             dropped);
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE, expected);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"wte.weight\": \"../model.safetensors\"}}");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE,
                        "the file of \"wte.weight\" must be a file name in the directory");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": []}");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_VALUE, "\"weight_map\" must be a non-empty object");
    unlink(strcat(strcpy(expected, dir), "/model.safetensors.index.json"));
    write_text(dir, "pytorch_model.bin", "not read");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_IO,
                        "holds pytorch_model.bin but no model.safetensors: Flare reads only safetensors");
    assert_null(m);
    fl_tensor_map_free(file);
    fl_tensor_map_free(shards[0]);
    fl_tensor_map_free(shards[1]);
    fl_tensor_map_free(short_shard);
    remove_files(dir,
                 (const char *const[]){"config.json", "model-00001-of-00002.safetensors",
                                       "model-00002-of-00002.safetensors", "pytorch_model.bin"},
                 4);
    assert_no_error();
}

/* The config.json files of the gpt2, bert-base-uncased and roberta-base repositories,
 * key for key: everything in them is read or known not to change the computation, so
 * the load goes on to the weights (absent here). */
static void published_configs_are_accepted(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_module *m = NULL;
    write_text(dir, "config.json",
               "{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"], "
               "\"attn_pdrop\": 0.1, \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, \"eos_token_id\": 50256, "
               "\"initializer_range\": 0.02, \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\", "
               "\"n_ctx\": 1024, \"n_embd\": 768, \"n_head\": 12, \"n_layer\": 12, \"n_positions\": 1024, "
               "\"resid_pdrop\": 0.1, \"summary_activation\": null, \"summary_first_dropout\": 0.1, "
               "\"summary_proj_to_labels\": true, \"summary_type\": \"cls_index\", \"summary_use_proj\": true, "
               "\"task_specific_params\": {\"text-generation\": {\"do_sample\": true, \"max_length\": 50}}, "
               "\"vocab_size\": 50257}");
    assert_fails_status(hf_load_gpt2(dir, &m, NULL), FL_ERR_IO, "model.safetensors: cannot be opened");
    write_text(dir, "config.json",
               "{\"architectures\": [\"BertForMaskedLM\"], \"attention_probs_dropout_prob\": 0.1, "
               "\"gradient_checkpointing\": false, \"hidden_act\": \"gelu\", \"hidden_dropout_prob\": 0.1, "
               "\"hidden_size\": 768, \"initializer_range\": 0.02, \"intermediate_size\": 3072, "
               "\"layer_norm_eps\": 1e-12, \"max_position_embeddings\": 512, \"model_type\": \"bert\", "
               "\"num_attention_heads\": 12, \"num_hidden_layers\": 12, \"pad_token_id\": 0, "
               "\"position_embedding_type\": \"absolute\", \"transformers_version\": \"4.6.0.dev0\", "
               "\"type_vocab_size\": 2, \"use_cache\": true, \"vocab_size\": 30522}");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_IO, "model.safetensors: cannot be opened");
    write_text(dir, "config.json",
               "{\"architectures\": [\"RobertaForMaskedLM\"], \"attention_probs_dropout_prob\": 0.1, "
               "\"bos_token_id\": 0, \"eos_token_id\": 2, \"hidden_act\": \"gelu\", \"hidden_dropout_prob\": 0.1, "
               "\"hidden_size\": 768, \"initializer_range\": 0.02, \"intermediate_size\": 3072, "
               "\"layer_norm_eps\": 1e-05, \"max_position_embeddings\": 514, \"model_type\": \"roberta\", "
               "\"num_attention_heads\": 12, \"num_hidden_layers\": 12, \"pad_token_id\": 1, "
               "\"type_vocab_size\": 1, \"vocab_size\": 50265}");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_IO, "model.safetensors: cannot be opened");
    /* albert-base-v2's keys, with the original release's unused ones (down_scale_factor,
     * gap_size, ...); written out here, as the hub cannot be reached from the tests */
    write_text(dir, "config.json",
               "{\"architectures\": [\"AlbertForMaskedLM\"], \"attention_probs_dropout_prob\": 0, "
               "\"bos_token_id\": 2, \"classifier_dropout_prob\": 0.1, \"down_scale_factor\": 1, "
               "\"embedding_size\": 128, \"eos_token_id\": 3, \"gap_size\": 0, \"hidden_act\": \"gelu_new\", "
               "\"hidden_dropout_prob\": 0, \"hidden_size\": 768, \"initializer_range\": 0.02, "
               "\"inner_group_num\": 1, \"intermediate_size\": 3072, \"layer_norm_eps\": 1e-12, "
               "\"max_position_embeddings\": 512, \"model_type\": \"albert\", \"net_structure_type\": 0, "
               "\"num_attention_heads\": 12, \"num_hidden_groups\": 1, \"num_hidden_layers\": 12, "
               "\"num_memory_blocks\": 0, \"pad_token_id\": 0, \"type_vocab_size\": 2, \"vocab_size\": 30000}");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_IO, "model.safetensors: cannot be opened");
    /* electra-small-discriminator's keys, written out here as well */
    write_text(dir, "config.json",
               "{\"architectures\": [\"ElectraForPreTraining\"], \"attention_probs_dropout_prob\": 0.1, "
               "\"embedding_size\": 128, \"hidden_act\": \"gelu\", \"hidden_dropout_prob\": 0.1, "
               "\"hidden_size\": 256, \"initializer_range\": 0.02, \"intermediate_size\": 1024, "
               "\"layer_norm_eps\": 1e-12, \"max_position_embeddings\": 512, \"model_type\": \"electra\", "
               "\"num_attention_heads\": 4, \"num_hidden_layers\": 12, \"pad_token_id\": 0, "
               "\"type_vocab_size\": 2, \"vocab_size\": 30522}");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_IO, "model.safetensors: cannot be opened");
    assert_null(m);
    remove_files(dir, (const char *const[]){"config.json"}, 1);
    assert_no_error();
}

#define BERT_DIR FLARE_FIXTURES "/hf_bert"

/* An encoder fixture's states with token types under a mask, and without either
 * (gen_hf.py's typed_states). */
static void typed_states_match(fl_module *m, const char *bin)
{
    fl_tensor *ids = fixture(bin, "ids"), *mask = fixture(bin, "mask");
    fl_variable *hidden = hf_bert_forward(m, ids, fixture(bin, "types"), mask);
    assert_non_null(hidden);
    assert_close(fl_v_value(hidden), fixture(bin, "hidden"), 1e-4, 1e-4);
    assert_close(hf_bert_mean_pool(fl_v_value(hidden), mask), fixture(bin, "pooled"), 1e-4, 1e-4);
    fl_variable *plain = hf_bert_forward(m, ids, NULL, NULL);
    assert_non_null(plain);
    assert_close(fl_v_value(plain), fixture(bin, "plain"), 1e-4, 1e-4);
}

static void bert_matches_transformers(void **state)
{
    (void)state;
    fl_module *m = NULL;
    hf_bert_config c;
    assert_int_equal(hf_load_bert(BERT_DIR, &m, &c), FL_OK);
    assert_int_equal(c.hidden, 24);
    assert_int_equal(c.intermediate, 40);
    assert_true(c.layer_norm_eps == 1e-6);
    typed_states_match(m, "hf_bert.bin");
    /* the module's own forward: ids alone */
    fl_tensor *ids = fixture("hf_bert.bin", "ids");
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


/* BertForPreTraining as the original release converted: the encoder under "bert.",
 * LayerNorm parameters named gamma and beta, and the pre-training heads under "cls.". */
static void bert_loads_the_original_layout(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_text(dir, "config.json", read_text(BERT_DIR "/config.json"));
    fl_tensor_map *file = NULL, *out = fl_tensor_map_create();
    assert_int_equal(fl_load_safetensors(BERT_DIR "/model.safetensors", &file), FL_OK);
    for (size_t i = 0; i < fl_tensor_map_count(file); i++) {
        char name[256];
        const char *hf = fl_tensor_map_name_at(file, i);
        size_t n = strlen(hf);
        if (n > 17 && strcmp(hf + n - 17, ".LayerNorm.weight") == 0)
            snprintf(name, sizeof name, "bert.%.*s.LayerNorm.gamma", (int)(n - 17), hf);
        else if (n > 15 && strcmp(hf + n - 15, ".LayerNorm.bias") == 0)
            snprintf(name, sizeof name, "bert.%.*s.LayerNorm.beta", (int)(n - 15), hf);
        else
            snprintf(name, sizeof name, "bert.%s", hf);
        fl_tensor_map_set(out, name, fl_tensor_map_tensor_at(file, i));
    }
    fl_tensor_map_set(out, "cls.predictions.bias", fl_zeros(FL_F32, FL_SHAPE(40)));
    fl_tensor_map_set(out, "cls.predictions.transform.dense.weight", fl_zeros(FL_F32, FL_SHAPE(24, 24)));
    fl_tensor_map_set(out, "cls.seq_relationship.weight", fl_zeros(FL_F32, FL_SHAPE(2, 24)));
    save_map(dir, "model.safetensors", out);
    fl_module *m = NULL;
    assert_int_equal(hf_load_bert(dir, &m, NULL), FL_OK);
    fl_tensor *ids = fixture("hf_bert.bin", "ids"), *mask = fixture("hf_bert.bin", "mask");
    fl_variable *hidden = hf_bert_forward(m, ids, fixture("hf_bert.bin", "types"), mask);
    assert_non_null(hidden);
    assert_close(fl_v_value(hidden), fixture("hf_bert.bin", "hidden"), 1e-4, 1e-4);
    fl_module_release(m);
    fl_tensor_map_free(file);
    fl_tensor_map_free(out);
    remove_files(dir, (const char *const[]){"config.json", "model.safetensors"}, 2);
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
    snprintf(text, sizeof text, BERT_CONFIG, ", \"pruned_heads\": {\"0\": [1]}");
    write_text(dir, "config.json", text);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"pruned_heads\" must be empty");
    snprintf(text, sizeof text, BERT_CONFIG, ", \"quantization_config\": {\"load_in_8bit\": true}");
    write_text(dir, "config.json", text);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "\"quantization_config\" (no quant_method) names a quantized checkpoint");
    write_text(dir, "config.json", "{\"model_type\": \"gpt2\"}");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "\"model_type\" must be \"bert\", \"roberta\", \"xlm-roberta\", \"camembert\", \"distilbert\", \"albert\" or "
                        "\"electra\", got gpt2");
    write_text(dir, "config.json", "[1, 2, 3]"); /* JSON, but not an object */
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "config.json: is not a JSON object");
    assert_null(m);
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

/* config.json from the text of path with the first occurrence of `from` replaced by `to`. */
static void write_config_replacing(const char *dir, const char *path, const char *from, const char *to)
{
    const char *text = read_text(path), *at = strstr(text, from);
    assert_non_null(at);
    char edited[4096];
    snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    write_text(dir, "config.json", edited);
}

#define ROBERTA_DIR FLARE_FIXTURES "/hf_roberta"

/* An encoder fixture's hidden states (bin: "hidden" and "pooled" of "ids" under "mask")
 * and, without a mask, those of the ids plain_ids ("plain"). */
static void encoder_states_match(fl_module *m, const char *bin, const char *plain_ids)
{
    fl_tensor *ids = fixture(bin, "ids"), *mask = fixture(bin, "mask");
    fl_variable *hidden = hf_bert_forward(m, ids, NULL, mask);
    assert_non_null(hidden);
    assert_close(fl_v_value(hidden), fixture(bin, "hidden"), 1e-4, 1e-4);
    assert_close(hf_bert_mean_pool(fl_v_value(hidden), mask), fixture(bin, "pooled"), 1e-4, 1e-4);
    fl_variable *plain = hf_bert_forward(m, fixture(bin, plain_ids), NULL, NULL);
    assert_non_null(plain);
    assert_close(fl_v_value(plain), fixture(bin, "plain"), 1e-4, 1e-4);
}

/* The RoBERTa fixture's states: right- and left-padded rows under their mask, then a
 * padding id inside a row without a mask, whose position is the padding id's. */
static void roberta_states_match(fl_module *m) { encoder_states_match(m, "hf_roberta.bin", "middle"); }

/* A head's tensor a task class saves beside its encoder: rows x cols zeros, or a
 * vector of rows where cols is 0. */
typedef struct head_tensor {
    const char *name;
    int64_t rows, cols;
} head_tensor;

/* The fixture checkpoint in from as a task class saves it into dir: its tensors under
 * wrapper + their names, the class's heads beside them (a list ending in a NULL name),
 * and its config.json. Returns the tensors written, for the caller to change. */
static fl_tensor_map *task_checkpoint(const char *dir, const char *from, const char *wrapper,
                                      const head_tensor *heads)
{
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", from);
    write_text(dir, "config.json", read_text(path));
    snprintf(path, sizeof path, "%s/model.safetensors", from);
    fl_tensor_map *file = NULL, *out = fl_tensor_map_create();
    assert_int_equal(fl_load_safetensors(path, &file), FL_OK);
    for (size_t i = 0; i < fl_tensor_map_count(file); i++) {
        char name[256];
        snprintf(name, sizeof name, "%s%s", wrapper, fl_tensor_map_name_at(file, i));
        assert_int_equal(fl_tensor_map_set(out, name, fl_tensor_map_tensor_at(file, i)), FL_OK);
    }
    fl_tensor_map_free(file);
    for (const head_tensor *h = heads; h->name; h++) {
        fl_tensor *zeros =
            h->cols ? fl_zeros(FL_F32, FL_SHAPE(h->rows, h->cols)) : fl_zeros(FL_F32, FL_SHAPE(h->rows));
        assert_int_equal(fl_tensor_map_set(out, h->name, zeros), FL_OK);
    }
    save_map(dir, "model.safetensors", out);
    return out;
}

static void roberta_matches_transformers(void **state)
{
    (void)state;
    fl_module *m = NULL;
    hf_bert_config c;
    assert_int_equal(hf_load_bert(ROBERTA_DIR, &m, &c), FL_OK);
    assert_int_equal(c.padding_id, 1);
    assert_int_equal(c.type_vocab, 1);
    assert_int_equal(c.max_positions, 12);
    assert_true(c.layer_norm_eps == 1e-5);
    roberta_states_match(m);
    /* 12 positions, the first two the padding id's and before it: 10 tokens */
    assert_fails(hf_bert_forward(m, fl_full(5, FL_I64, FL_SHAPE(1, 11)), NULL, NULL), FL_ERR_SHAPE,
                 "11 positions exceed the 10 of the model (RoBERTa's positions start after pad_token_id)");
    assert_fails(hf_bert_forward(m, fixture("hf_roberta.bin", "ids"), fl_ones(FL_I64, FL_SHAPE(3, 10)), NULL),
                 FL_ERR_VALUE, "token types must lie in [0, 1)");
    fl_module_release(m);
    m = NULL;
    assert_int_equal(hf_load_bert(BERT_DIR, &m, &c), FL_OK);
    assert_int_equal(c.padding_id, -1);
    fl_module_release(m);
    assert_no_error();
}

/* RobertaForMaskedLM's layout (the encoder under "roberta.", the head under "lm_head."),
 * saved by XLMRobertaModel (model_type "xlm-roberta", the same model); then what the
 * loader refuses. */
static void roberta_loads_the_published_layouts(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_tensor_map *out = task_checkpoint(dir, ROBERTA_DIR, "roberta.",
                                         (const head_tensor[]){{"lm_head.dense.weight", 24, 24},
                                                               {"lm_head.layer_norm.weight", 24, 0},
                                                               {"lm_head.bias", 40, 0},
                                                               {NULL, 0, 0}});
    fl_module *m = NULL;
    assert_int_equal(hf_load_bert(dir, &m, NULL), FL_OK);
    roberta_states_match(m);
    fl_module_release(m);
    m = NULL;
    /* XLM-RoBERTa and CamemBERT are RoBERTa's code (the fixture's generator checks that
     * their models give its states) */
    const char *same[] = {"\"xlm-roberta\"", "\"camembert\""};
    for (int k = 0; k < 2; k++) {
        write_config_replacing(dir, ROBERTA_DIR "/config.json", "\"roberta\"", same[k]);
        assert_int_equal(hf_load_bert(dir, &m, NULL), FL_OK);
        roberta_states_match(m);
        fl_module_release(m);
        m = NULL;
    }

    /* BERT's pre-training head is not RoBERTa's */
    fl_tensor_map_set(out, "cls.predictions.bias", fl_zeros(FL_F32, FL_SHAPE(40)));
    save_map(dir, "model.safetensors", out);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "the tensor \"cls.predictions.bias\" is not part of the RobertaModel of config.json");
    write_config_replacing(dir, ROBERTA_DIR "/config.json", "\"pad_token_id\": 1", "\"pad_token_id\": 11");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "\"pad_token_id\" (11) must be a token id below \"vocab_size\" (40) with a position after it "
                        "below \"max_position_embeddings\" (12)");
    write_config_replacing(dir, ROBERTA_DIR "/config.json", "\"pad_token_id\": 1", "\"pad_token_id\": null");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"pad_token_id\" must be an integer >= 0");
    write_config_replacing(dir, ROBERTA_DIR "/config.json", "\"roberta\"", "\"deberta-v2\"");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"albert\" or \"electra\", got deberta-v2");
    assert_null(m);
    fl_tensor_map_free(out);
    remove_files(dir, (const char *const[]){"config.json", "model.safetensors"}, 2);
    assert_no_error();
}

#define DISTILBERT_DIR FLARE_FIXTURES "/hf_distilbert"

static void distilbert_states_match(fl_module *m) { encoder_states_match(m, "hf_distilbert.bin", "ids"); }

/* DistilBertModel's own layout, then DistilBertForMaskedLM's (the encoder under
 * "distilbert.", the head beside it), then what the loader refuses. */
static void distilbert_matches_transformers(void **state)
{
    (void)state;
    fl_module *m = NULL;
    hf_bert_config c;
    assert_int_equal(hf_load_bert(DISTILBERT_DIR, &m, &c), FL_OK);
    assert_int_equal(c.type_vocab, 0);
    assert_int_equal(c.padding_id, -1);
    assert_int_equal(c.hidden, 24);
    assert_int_equal(c.intermediate, 40);
    assert_true(c.layer_norm_eps == 1e-12);
    distilbert_states_match(m);
    fl_tensor *ids = fixture("hf_distilbert.bin", "ids");
    assert_fails(hf_bert_forward(m, ids, fl_zeros_like(ids), NULL), FL_ERR_VALUE,
                 "DistilBERT has no token types: pass NULL");
    fl_module_release(m);
    m = NULL;

    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_tensor_map *out = task_checkpoint(dir, DISTILBERT_DIR, "distilbert.",
                                         (const head_tensor[]){{"vocab_transform.weight", 24, 24},
                                                               {"vocab_layer_norm.bias", 24, 0},
                                                               {"vocab_projector.bias", 40, 0},
                                                               {"pre_classifier.bias", 24, 0},
                                                               {NULL, 0, 0}});
    assert_int_equal(hf_load_bert(dir, &m, NULL), FL_OK);
    distilbert_states_match(m);
    fl_module_release(m);
    m = NULL;

    /* BERT's token types are not DistilBERT's */
    fl_tensor_map_set(out, "distilbert.embeddings.token_type_embeddings.weight", fl_zeros(FL_F32, FL_SHAPE(2, 24)));
    save_map(dir, "model.safetensors", out);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "the tensor \"distilbert.embeddings.token_type_embeddings.weight\" is not part of the "
                        "DistilBertModel of config.json");
    write_config_replacing(dir, DISTILBERT_DIR "/config.json", "\"gelu\"", "\"relu\"");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"activation\" must be \"gelu\", got relu");
    write_config_replacing(dir, DISTILBERT_DIR "/config.json", "\"n_heads\": 3", "\"n_heads\": 5");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"n_heads\" (5) must divide \"dim\" (24)");
    write_config_replacing(dir, DISTILBERT_DIR "/config.json", "\"dim\": 24", "\"dim\": null");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"dim\" must be a positive integer");
    assert_null(m);
    fl_tensor_map_free(out);
    remove_files(dir, (const char *const[]){"config.json", "model.safetensors"}, 2);
    assert_no_error();
}

#define ALBERT_DIR FLARE_FIXTURES "/hf_albert"

/* AlbertModel's own layout (embeddings of 16 projected to 24, one layer's weights
 * applied by all three, GELU's tanh form), then AlbertForPreTraining's (the encoder
 * under "albert.", the heads beside it), then what the loader refuses. */
static void albert_matches_transformers(void **state)
{
    (void)state;
    fl_module *m = NULL;
    hf_bert_config c;
    assert_int_equal(hf_load_bert(ALBERT_DIR, &m, &c), FL_OK);
    assert_true(c.shared_layers && c.gelu_tanh);
    assert_int_equal(c.embedding, 16);
    assert_int_equal(c.hidden, 24);
    assert_int_equal(c.layers, 3);
    assert_int_equal(c.padding_id, -1);
    assert_true(c.layer_norm_eps == 1e-6);
    typed_states_match(m, "hf_albert.bin");
    fl_module_release(m);
    m = NULL;

    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_tensor_map *out = task_checkpoint(dir, ALBERT_DIR, "albert.",
                                         (const head_tensor[]){{"predictions.dense.weight", 16, 24},
                                                               {"predictions.LayerNorm.weight", 16, 0},
                                                               {"predictions.bias", 40, 0},
                                                               {"sop_classifier.classifier.weight", 2, 24},
                                                               {NULL, 0, 0}});
    assert_int_equal(hf_load_bert(dir, &m, NULL), FL_OK);
    typed_states_match(m, "hf_albert.bin");
    fl_module_release(m);
    m = NULL;

    /* the exact GELU gives other states (the fixture's weights are wide enough that
     * GELU's two forms differ): the activation is read */
    write_config_replacing(dir, ALBERT_DIR "/config.json", "\"gelu_new\"", "\"gelu\"");
    assert_int_equal(hf_load_bert(dir, &m, &c), FL_OK);
    assert_false(c.gelu_tanh);
    fl_variable *exact = hf_bert_forward(m, fixture("hf_albert.bin", "ids"), NULL, NULL);
    assert_non_null(exact);
    double apart = fl_item(fl_max(fl_abs(fl_sub(fl_v_value(exact), fixture("hf_albert.bin", "plain"))), NULL, 0, false));
    assert_true(apart > 4e-4); /* twice what the states' check lets pass */
    fl_module_release(m);
    m = NULL;

    /* a second layer of weights is not this model's */
    fl_tensor_map_set(out, "albert.encoder.albert_layer_groups.0.albert_layers.1.ffn.bias",
                      fl_zeros(FL_F32, FL_SHAPE(40)));
    save_map(dir, "model.safetensors", out);
    write_text(dir, "config.json", read_text(ALBERT_DIR "/config.json"));
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "the tensor \"albert.encoder.albert_layer_groups.0.albert_layers.1.ffn.bias\" is not part of "
                        "the AlbertModel of config.json");
    write_config_replacing(dir, ALBERT_DIR "/config.json", "\"gelu_new\"", "\"relu\"");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "\"hidden_act\" \"relu\" is not one Flare has (\"gelu_new\", \"gelu_pytorch_tanh\", \"gelu\")");
    write_config_replacing(dir, ALBERT_DIR "/config.json", "\"num_hidden_groups\": 1", "\"num_hidden_groups\": 3");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "\"num_hidden_groups\" and \"inner_group_num\" must be 1 (got 3 and 1): Flare's ALBERT shares "
                        "one layer's weights across all layers");
    write_config_replacing(dir, ALBERT_DIR "/config.json", "\"embedding_size\": 16", "\"embedding_size\": 0");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"embedding_size\" must be a positive integer");
    assert_null(m);
    fl_tensor_map_free(out);
    remove_files(dir, (const char *const[]){"config.json", "model.safetensors"}, 2);
    assert_no_error();
}

#define ELECTRA_DIR FLARE_FIXTURES "/hf_electra"

/* ElectraModel's own layout (embeddings of 16 projected to 24), then
 * ElectraForPreTraining's and ElectraForMaskedLM's heads beside "electra.", then what
 * the loader refuses. */
static void electra_matches_transformers(void **state)
{
    (void)state;
    fl_module *m = NULL;
    hf_bert_config c;
    assert_int_equal(hf_load_bert(ELECTRA_DIR, &m, &c), FL_OK);
    assert_int_equal(c.family, HF_ELECTRA);
    assert_true(c.projected && !c.shared_layers && !c.gelu_tanh);
    assert_int_equal(c.embedding, 16);
    assert_int_equal(c.layers, 2);
    typed_states_match(m, "hf_electra.bin");
    fl_module_release(m);
    m = NULL;

    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const head_tensor heads[] = {{"discriminator_predictions.dense.weight", 24, 24},
                                 {"discriminator_predictions.dense_prediction.weight", 1, 24},
                                 {"generator_predictions.LayerNorm.weight", 16, 0},
                                 {"generator_lm_head.bias", 40, 0},
                                 {NULL, 0, 0}};
    fl_tensor_map *out = task_checkpoint(dir, ELECTRA_DIR, "electra.", heads);
    assert_int_equal(hf_load_bert(dir, &m, NULL), FL_OK);
    typed_states_match(m, "hf_electra.bin");
    fl_module_release(m);
    m = NULL;

    /* without its projection, the embeddings do not fit the layers */
    fl_tensor_map *bare = fl_tensor_map_create();
    for (size_t i = 0; i < fl_tensor_map_count(out); i++)
        if (!strstr(fl_tensor_map_name_at(out, i), "embeddings_project"))
            fl_tensor_map_set(bare, fl_tensor_map_name_at(out, i), fl_tensor_map_tensor_at(out, i));
    save_map(dir, "model.safetensors", bare);
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE,
                        "the tensor \"electra.embeddings_project.weight\" is missing");
    write_config_replacing(dir, ELECTRA_DIR "/config.json", "\"embedding_size\": 16", "\"embedding_size\": 24");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_SHAPE, "electra.embeddings.word_embeddings.weight");
    save_map(dir, "model.safetensors", out);
    write_config_replacing(dir, ELECTRA_DIR "/config.json", "\"gelu\"", "\"relu\"");
    assert_fails_status(hf_load_bert(dir, &m, NULL), FL_ERR_VALUE, "\"hidden_act\" must be \"gelu\", got relu");
    assert_null(m);
    fl_tensor_map_free(bare);
    fl_tensor_map_free(out);
    remove_files(dir, (const char *const[]){"config.json", "model.safetensors"}, 2);
    assert_no_error();
}

static fl_status load_bert(const char *dir, fl_module **m) { return hf_load_bert(dir, m, NULL); }
static fl_status load_gpt2(const char *dir, fl_module **m) { return hf_load_gpt2(dir, m, NULL); }

/* A config.json whose model the weights cannot fill (edited, or of another checkpoint)
 * is refused before the model is built when it needs more than twice the file's
 * values: building first would allocate the size the config names, here petabytes.
 * The counts printed check each architecture's count to four digits. Below twice,
 * the per-tensor checks say what is missing; a file with exactly the model's values
 * loads. */
static void a_config_the_weights_cannot_fill_is_refused(void **state)
{
    (void)state;
    static const struct {
        const char *fixture, *from, *to, *message;
        fl_status (*load)(const char *dir, fl_module **m);
    } cases[] = {
        {BERT_DIR, "\"hidden_size\": 24", "\"hidden_size\": 24000000",
         "model.safetensors holds 11000 values, but the model of config.json has 4.608e+15 parameters, more than "
         "twice as many: the config does not belong to these weights",
         load_bert},
        {BERT_DIR, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 5", "has 2.384e+04 parameters", load_bert},
        {BERT_DIR, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3",
         "model.safetensors: the tensor \"encoder.layer.2.attention.output.dense.weight\" is missing", load_bert},
        {ALBERT_DIR, "\"embedding_size\": 16", "\"embedding_size\": 16000000",
         "model.safetensors holds 6448 values, but the model of config.json has 1.344e+09 parameters", load_bert},
        {GPT2_DIR, "\"n_embd\": 24", "\"n_embd\": 24000000",
         "model.safetensors holds 21600 values, but the model of config.json has 1.382e+16 parameters", load_gpt2},
        {GPT2_DIR, "\"vocab_size\": 280", "\"vocab_size\": 28000", "has 6.869e+05 parameters", load_gpt2},
    };
    char dir[] = "/tmp/flare_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fl_module *m = NULL;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[256];
        fl_tensor_map *file = NULL;
        snprintf(path, sizeof path, "%s/model.safetensors", cases[c].fixture);
        assert_int_equal(fl_load_safetensors(path, &file), FL_OK);
        save_map(dir, "model.safetensors", file);
        fl_tensor_map_free(file);
        snprintf(path, sizeof path, "%s/config.json", cases[c].fixture);
        write_config_replacing(dir, path, cases[c].from, cases[c].to);
        assert_fails_status(cases[c].load(dir, &m), FL_ERR_VALUE, cases[c].message);
        assert_null(m);
    }
    /* Without the pooler, which Flare's encoder does not have, the file holds exactly
     * the encoder's values. */
    fl_tensor_map *file = NULL, *out = fl_tensor_map_create();
    assert_int_equal(fl_load_safetensors(BERT_DIR "/model.safetensors", &file), FL_OK);
    for (size_t i = 0; i < fl_tensor_map_count(file); i++)
        if (strncmp(fl_tensor_map_name_at(file, i), "pooler.", 7) != 0)
            fl_tensor_map_set(out, fl_tensor_map_name_at(file, i), fl_tensor_map_tensor_at(file, i));
    save_map(dir, "model.safetensors", out);
    write_text(dir, "config.json", read_text(BERT_DIR "/config.json"));
    assert_int_equal(hf_load_bert(dir, &m, NULL), FL_OK);
    fl_module_release(m);
    fl_tensor_map_free(file);
    fl_tensor_map_free(out);
    remove_files(dir, (const char *const[]){"config.json", "model.safetensors"}, 2);
    assert_no_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        scoped_test(gpt2_matches_transformers),
        scoped_test(refuses_what_it_cannot_compute),
        scoped_test(gpt2_loads_the_published_layout),
        scoped_test(gpt2_loads_a_sharded_checkpoint),
        scoped_test(published_configs_are_accepted),
        scoped_test(bert_loads_the_original_layout),
        scoped_test(bert_matches_transformers),
        scoped_test(bert_refuses_what_it_cannot_compute),
        scoped_test(roberta_matches_transformers),
        scoped_test(roberta_loads_the_published_layouts),
        scoped_test(distilbert_matches_transformers),
        scoped_test(albert_matches_transformers),
        scoped_test(electra_matches_transformers),
        scoped_test(a_config_the_weights_cannot_fill_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
