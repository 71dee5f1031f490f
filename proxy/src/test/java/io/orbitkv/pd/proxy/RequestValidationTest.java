package io.orbitkv.pd.proxy;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.engine.client.http.CompletionRequest.Invalid;
import io.orbitkv.pd.engine.client.http.CompletionRequest.Kind;
import io.orbitkv.pd.engine.client.http.KvTransferParams;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;

/** What the proxy refuses with 400 and the reason it gives (the HTTP side is covered by ProxyIT). */
class RequestValidationTest {

    private static final CompletionRequest.Limits LIMITS = new CompletionRequest.Limits(100, 64, 4);

    private static CompletionRequest parse(Kind kind, String json) throws Invalid {
        return CompletionRequest.parse(kind, json.getBytes(StandardCharsets.UTF_8), LIMITS);
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
            "empty body||request body is empty|",
            "not JSON|{\"model\": \"m\", \"prompt\": |malformed JSON|",
            "array body|[1, 2]|must be a JSON object, got array|",
            "no model|{\"prompt\": \"hi\"}|'model' is required|model",
            "model not a string|{\"model\": 3, \"prompt\": \"hi\"}|'model' is required|model",
            "no prompt|{\"model\": \"m\"}|'prompt' is required|prompt",
            "prompt batch|{\"model\": \"m\", \"prompt\": [\"a\", \"b\"]}|batches and token arrays are not supported|prompt",
            "prompt number|{\"model\": \"m\", \"prompt\": 5}|'prompt' must be a string|prompt",
            "empty prompt|{\"model\": \"m\", \"prompt\": \"\"}|the prompt is empty|prompt",
            "prompt too long|{\"model\": \"m\", \"prompt\": \"" + "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                    + "\"}|prompt too long: 110 characters (limit 100)|prompt",
            "max_tokens zero|{\"model\": \"m\", \"prompt\": \"hi\", \"max_tokens\": 0}|'max_tokens' must be 1..64, got 0|max_tokens",
            "max_tokens too big|{\"model\": \"m\", \"prompt\": \"hi\", \"max_tokens\": 65}|'max_tokens' must be 1..64, got 65|max_tokens",
            "max_tokens text|{\"model\": \"m\", \"prompt\": \"hi\", \"max_tokens\": \"8\"}|'max_tokens' must be an integer|max_tokens",
            "stream text|{\"model\": \"m\", \"prompt\": \"hi\", \"stream\": \"yes\"}|'stream' must be true or false|stream",
            "n=2|{\"model\": \"m\", \"prompt\": \"hi\", \"n\": 2}|only n=1 is supported|n",
            "temperature|{\"model\": \"m\", \"prompt\": \"hi\", \"temperature\": 7}|'temperature' must be a number in 0..2|temperature",
    })
    void completionsRefusedWithAReason(String name, String body, String message, String param) {
        assertThatThrownBy(() -> parse(Kind.COMPLETION, body == null ? "" : body)).isInstanceOf(Invalid.class).hasMessageContaining(message)
                .satisfies(e -> assertThat(((Invalid) e).param()).isEqualTo(param));
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
            "no messages|{\"model\": \"m\"}|'messages' is required|messages",
            "empty messages|{\"model\": \"m\", \"messages\": []}|'messages' is required|messages",
            "too many|{\"model\": \"m\", \"messages\": [{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"a\"}]}|too many messages: 5|messages",
            "bad role|{\"model\": \"m\", \"messages\": [{\"role\": \"robot\", \"content\": \"hi\"}]}|messages[0].role must be one of|messages[0].role",
            "image part|{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}|other modalities are not supported|messages[0].content",
    })
    void chatRefusedWithAReason(String name, String body, String message, String param) {
        assertThatThrownBy(() -> parse(Kind.CHAT, body)).isInstanceOf(Invalid.class).hasMessageContaining(message)
                .satisfies(e -> assertThat(((Invalid) e).param()).isEqualTo(param));
    }

    @Test
    void validRequestsParseAndForwardWithTheProxysParameters() throws Invalid {
        CompletionRequest c = parse(Kind.COMPLETION, "{\"model\": \"m\", \"prompt\": [\"hello\"], \"max_tokens\": 8, \"stream\": true,"
                + " \"stream_options\": {\"include_usage\": true}, \"user\": \"kept\"}");
        assertThat(c.prompt()).isEqualTo("hello");
        assertThat(c.maxTokens()).isEqualTo(8);
        assertThat(c.stream()).isTrue();
        assertThat(c.includeUsage()).isTrue();
        var forwarded = c.forward(KvTransferParams.forPrefill("r1", "p0", "d0"), false, 1);
        assertThat(forwarded.path("max_tokens").asInt()).isEqualTo(1);
        assertThat(forwarded.path("stream").asBoolean()).isFalse();
        assertThat(forwarded.has("stream_options")).isFalse();
        assertThat(forwarded.path("user").asText()).isEqualTo("kept");
        assertThat(KvTransferParams.from(forwarded.get("kv_transfer_params"))).isEqualTo(KvTransferParams.forPrefill("r1", "p0", "d0"));

        CompletionRequest chat = parse(Kind.CHAT, "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"be brief\"},"
                + " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}], \"max_completion_tokens\": 3}");
        assertThat(chat.prompt()).isEqualTo("<|system|>be brief\n<|user|>hi\n<|assistant|>");
        assertThat(chat.maxTokens()).isEqualTo(3);
    }

    /**
     * What the engines get is the form vLLM's P/D proxies send (its toy proxy, llm-d): the prefill a one-token, unstreamed
     * request with {@code do_remote_decode}, the decode the client's request with {@code do_remote_prefill} — and the
     * admitted request id the vLLM connector ({@code orbitkv_pd.vllm_scheduler.handoff}) reads, since vLLM's own request id
     * differs per engine (docs/vllm.md).
     */
    @Test
    void theEnginesGetKvTransferParamsInTheFormVllmsPdProxiesSend() throws Invalid {
        CompletionRequest chat = parse(Kind.CHAT, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
                + " \"max_completion_tokens\": 30, \"stream\": true, \"stream_options\": {\"include_usage\": true}}");
        var prefill = chat.forward(KvTransferParams.forPrefill("r7", "p0", "d0"), false, 1);
        assertThat(prefill.path("max_tokens").asInt()).isEqualTo(1);
        assertThat(prefill.has("max_completion_tokens")).isFalse();
        assertThat(prefill.path("stream").asBoolean()).isFalse();
        assertThat(prefill.has("stream_options")).isFalse();
        var p = prefill.path("kv_transfer_params");
        assertThat(p.path("do_remote_decode").asBoolean()).isTrue();
        assertThat(p.path("do_remote_prefill").asBoolean()).isFalse();
        assertThat(p.path("request_id").asText()).isEqualTo("r7");
        var decode = chat.forward(KvTransferParams.forDecode("r7", "p0", "d0"), chat.stream(), null);
        assertThat(decode.path("max_completion_tokens").asInt()).isEqualTo(30);
        assertThat(decode.path("stream").asBoolean()).isTrue();
        var d = decode.path("kv_transfer_params");
        assertThat(d.path("do_remote_prefill").asBoolean()).isTrue();
        assertThat(d.path("do_remote_decode").asBoolean()).isFalse();
        assertThat(d.path("request_id").asText()).isEqualTo("r7");
    }

    @Test
    void errorBodiesAreOpenAiShaped() {
        assertThat(CompletionRequest.errorBody("bad", "invalid_request_error", "prompt", 400).toString())
                .isEqualTo("{\"error\":{\"message\":\"bad\",\"type\":\"invalid_request_error\",\"param\":\"prompt\",\"code\":\"400\"}}");
    }
}
