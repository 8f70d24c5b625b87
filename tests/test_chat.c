/* test_chat.c: the server's pure parts: chat templates (recognition from
 * template text, names, rendering of each family), OpenAI request
 * validation, and JSON string escaping of arbitrary bytes. */
#include <cjson/cJSON.h>

#include "server/chat.h"
#include "server/openai.h"
#include "server/sbuf.h"
#include "test.h"

static const chat_msg conv[] = {
    {"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"},
};

static void render_is(chat_tmpl t, const char *want) {
    char err[256];
    char *got = chat_render(t, conv, 4, err, sizeof(err));
    CHECK(got && !strcmp(got, want), "%s:\n got  %s\n want %s", chat_tmpl_name(t),
          got ? got : err, want);
    free(got);
}

static void renders_each_family(void) {
    render_is(CHAT_CHATML, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
                           "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
                           "<|im_start|>assistant\n");
    render_is(CHAT_LLAMA3, "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
                           "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|>"
                           "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    render_is(CHAT_LLAMA2, "[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]");
    render_is(CHAT_MISTRAL, "[INST] S\n\nU1 [/INST]A1</s>[INST] U2 [/INST]");
    render_is(CHAT_PHI3, "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n"
                         "<|user|>\nU2<|end|>\n<|assistant|>\n");
    render_is(CHAT_GEMMA, "<start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\n"
                          "A1<end_of_turn>\n<start_of_turn>user\nU2<end_of_turn>\n"
                          "<start_of_turn>model\n");
    char err[256];
    chat_msg bad[] = {{"wizard", "x"}};
    char *r = chat_render(CHAT_CHATML, bad, 1, err, sizeof(err));
    CHECK(!r && strstr(err, "wizard"), "unknown role accepted");
    free(r);
    CHECK(!strcmp(chat_tmpl_eot(CHAT_CHATML), "<|im_end|>") &&
          !strcmp(chat_tmpl_eot(CHAT_LLAMA3), "<|eot_id|>") &&
          !strcmp(chat_tmpl_eot(CHAT_PHI3), "<|end|>") &&
          !strcmp(chat_tmpl_eot(CHAT_GEMMA), "<end_of_turn>") && !chat_tmpl_eot(CHAT_NONE),
          "end-of-turn strings");
}

static void recognizes_templates(void) {
    /* fragments of the families' Jinja templates */
    CHECK(chat_tmpl_detect("{% for message in messages %}{{'<|im_start|>' + message['role']") ==
          CHAT_CHATML, "chatml");
    CHECK(chat_tmpl_detect("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}") ==
          CHAT_LLAMA3, "llama3");
    CHECK(chat_tmpl_detect("{{ bos_token + '[INST] ' + '<<SYS>>\\n' + system + '\\n<</SYS>>' }}") ==
          CHAT_LLAMA2, "llama2");
    CHECK(chat_tmpl_detect("{{ '[INST] ' + message['content'] + ' [/INST]' }}") == CHAT_MISTRAL,
          "mistral");
    CHECK(chat_tmpl_detect("{{'<|user|>' + '\\n' + message['content'] + '<|end|>'}}") == CHAT_PHI3,
          "phi3");
    CHECK(chat_tmpl_detect("{{ '<start_of_turn>' + role + '\\n' }}") == CHAT_GEMMA, "gemma");
    CHECK(chat_tmpl_detect("{{ message.content }}") == CHAT_NONE && chat_tmpl_detect("") == CHAT_NONE &&
          chat_tmpl_detect(NULL) == CHAT_NONE, "unknown");
    CHECK(chat_tmpl_parse("chatml") == CHAT_CHATML && chat_tmpl_parse("qwen") == CHAT_CHATML &&
          chat_tmpl_parse("llama3") == CHAT_LLAMA3 && chat_tmpl_parse("gemma") == CHAT_GEMMA &&
          chat_tmpl_parse("jinja") == -1, "names");
}

static int parse(const char *body, bool chat, oai_req *r, oai_error *e) {
    return oai_parse(body, strlen(body), chat, 32000, r, e);
}

static void bad(const char *body, bool chat, const char *param) {
    oai_req r;
    oai_error e;
    int rc = parse(body, chat, &r, &e);
    CHECK(rc < 0 && e.status == 400 && (!param || (e.param && !strcmp(e.param, param))),
          "%s: rc %d param %s (%s)", body, rc, rc < 0 && e.param ? e.param : "-",
          rc < 0 ? e.message : "accepted");
    oai_req_free(&r);
}

static void validates_requests(void) {
    oai_req r;
    oai_error e;
    CHECK(parse("{\"prompt\": \"hi\"}", false, &r, &e) == 0, "%s", e.message);
    CHECK(r.sampling.temperature == 1.0f && r.sampling.top_k == 0 && r.sampling.min_p == 0 &&
          r.sampling.top_p == 1.0f && r.max_tokens == 0 && r.logprobs == -1 && !r.seed_given,
          "OpenAI defaults");
    oai_req_free(&r);
    CHECK(parse("{\"prompt\": [[1, 2, 3]], \"max_completion_tokens\": 5, \"stop\": \"x\", "
                "\"seed\": 3, \"logprobs\": 2, \"top_k\": 40, \"min_p\": 0.1, \"cache_salt\": \"s\", "
                "\"speculative\": {\"method\": \"ngram\", \"k\": 3}, \"user\": \"u\", \"n\": 1}",
                false, &r, &e) == 0, "%s", e.message);
    CHECK(r.n_tokens == 3 && r.tokens[2] == 3 && r.max_tokens == 5 && r.n_stop == 1 &&
          r.seed_given && r.sampling.seed == 3 && r.logprobs == 2 && r.sampling.top_k == 40 &&
          r.spec == SP_SPEC_NGRAM && r.spec_k == 3 && !strcmp(r.cache_salt, "s"), "fields");
    oai_req_free(&r);
    CHECK(parse("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                "\"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", "
                "\"content\": null}], \"logprobs\": true, \"top_logprobs\": 3, \"stream\": true, "
                "\"stream_options\": {\"include_usage\": true}}", true, &r, &e) == 0, "%s", e.message);
    CHECK(r.n_msgs == 2 && !strcmp(r.msgs[0].content, "ab") && r.logprobs == 3 && r.stream &&
          r.include_usage, "chat fields");
    oai_req_free(&r);
    bad("{", false, NULL);
    bad("\"text\"", false, NULL);
    bad("{}", false, "prompt");
    bad("{\"prompt\": 3}", false, "prompt");
    bad("{\"prompt\": []}", false, "prompt");
    bad("{\"prompt\": [\"a\", \"b\"]}", false, "prompt");
    bad("{\"prompt\": [1, 32000]}", false, "prompt");
    bad("{\"prompt\": [1.5]}", false, "prompt");
    bad("{\"prompt\": \"a\", \"max_tokens\": 0}", false, "max_tokens");
    bad("{\"prompt\": \"a\", \"max_tokens\": 1.5}", false, "max_tokens");
    bad("{\"prompt\": \"a\", \"temperature\": -1}", false, "temperature");
    bad("{\"prompt\": \"a\", \"temperature\": \"hot\"}", false, "temperature");
    bad("{\"prompt\": \"a\", \"top_p\": 1.5}", false, "top_p");
    bad("{\"prompt\": \"a\", \"presence_penalty\": 3}", false, "presence_penalty");
    bad("{\"prompt\": \"a\", \"frequency_penalty\": -3}", false, "frequency_penalty");
    bad("{\"prompt\": \"a\", \"n\": 3}", false, "n");
    bad("{\"prompt\": \"a\", \"stop\": 5}", false, "stop");
    bad("{\"prompt\": \"a\", \"logprobs\": 30}", false, "logprobs");
    bad("{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": true}}", false, "stream_options");
    bad("{\"prompt\": \"a\", \"speculative\": {\"method\": \"ngram\", \"k\": 99}}", false, "k");
    bad("{\"prompt\": \"a\", \"model\": 5}", false, "model");
    bad("{\"prompt\": \"a\", \"cache_salt\": 5}", false, "cache_salt");
    bad("{\"messages\": []}", true, "messages");
    bad("{\"messages\": [{\"role\": \"user\"}]}", true, "messages");
    bad("{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", true, "messages");
    bad("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", true,
        "top_logprobs");
    bad("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 1}", true,
        "logprobs");
}

static void escapes_json(void) {
    sbuf b = {0};
    const char s[] = "a\"\\\n\x01\xff\xc3\xa9\xe2\x82";
    sb_json_str(&b, s, sizeof(s) - 1);
    CHECK(b.p && !strcmp(b.p, "\"a\\\"\\\\\\n\\u0001\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\""),
          "%s", b.p);
    cJSON *j = cJSON_Parse(b.p);
    CHECK(j && cJSON_IsString(j), "not valid JSON");
    cJSON_Delete(j);
    sb_free(&b);
}

int main(void) {
    RUN(renders_each_family);
    RUN(recognizes_templates);
    RUN(validates_requests);
    RUN(escapes_json);
    TEST_END();
}
