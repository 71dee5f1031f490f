package io.orbitkv.pd.harness;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.engine.sim.SimModel;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A client of the proxy for the demo, the benchmark and the end-to-end tests: sends OpenAI requests (completion or
 * chat, streaming or not, P/D or colocated), measures time to first token, and can walk away mid-request (a client
 * disconnect) to exercise cancellation. Every answer is checked against the model's reference answer computed
 * here, independently of any engine.
 */
public final class LoadClient implements AutoCloseable {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String[] WORDS = ("the of and to in is that for it as with was on be by this are from at or an which not have has but all "
            + "their more can one other were been its also into only than some these would first time new like over such many most two may "
            + "prefill decode cache page block layer token kernel tensor stream broker partition offset lease epoch transfer worker proxy engine "
            + "replay audit latency throughput handoff memory scheduler batch").split(" ");

    /** When the client walks away. */
    public enum Cancel { NONE, AFTER_DELAY, WHILE_TRANSFERRING, AFTER_FIRST_TOKEN }

    /**
     * One request.
     *
     * @param index     its number in the workload
     * @param chat      chat completion (else completion)
     * @param prompt    the prompt (chat: the user message)
     * @param maxTokens tokens to generate
     * @param stream    server-sent events
     * @param colocated route to one engine without handoff (the baseline)
     * @param cancel    whether and when the client disconnects
     * @param cancelMs  for {@link Cancel#AFTER_DELAY}: after this many ms
     */
    public record Request(int index, boolean chat, String prompt, int maxTokens, boolean stream, boolean colocated, Cancel cancel, long cancelMs) {
        public Request colocatedTwin() {
            return new Request(index, chat, prompt, maxTokens, stream, true, Cancel.NONE, 0);
        }

        /** The answer every engine must give: the model's generation over the rendered prompt. */
        public String expected(SimModel model) {
            String rendered = chat ? CompletionRequest.chatTemplate(List.<String[]>of(new String[] {"user", prompt})) : prompt;
            return model.answer(rendered, maxTokens);
        }
    }

    /**
     * What came back.
     *
     * @param status    HTTP status (0: no response, e.g. cancelled before headers)
     * @param text      the answer text (streamed chunks joined)
     * @param ttftNanos time to the first token (non-streaming: to the whole answer), -1 if none
     * @param totalNanos time to the end
     * @param requestId the proxy's request id (the {@code x-request-id} sent, when no response came)
     * @param handoffMs the proxy's measured handoff (prefill answered → decode started), NaN if not reported
     * @param kvBytes   bytes of KV the decode engine received (0 for colocated)
     * @param mode      how the engine served it (decode, recomputed, colocated)
     * @param error     error body or exception, null when fine
     * @param walkedAway the client disconnected on purpose
     */
    public record Result(Request request, int status, String text, long ttftNanos, long totalNanos, String requestId, double handoffMs, long kvBytes,
                         String mode, String error, boolean walkedAway, long[] tokenGapsNanos) {
        public Result(Request request, int status, String text, long ttftNanos, long totalNanos, String requestId, double handoffMs, long kvBytes,
                      String mode, String error, boolean walkedAway) {
            this(request, status, text, ttftNanos, totalNanos, requestId, handoffMs, kvBytes, mode, error, walkedAway, new long[0]);
        }

        public boolean ok() {
            return status == 200 && error == null && !walkedAway;
        }

        /**
         * Time per output token after the first (TPOT, ns): from the first streamed token to the last, over the tokens
         * after the first; -1 for an answer that was not streamed or had one token.
         */
        public long tpotNanos() {
            if (tokenGapsNanos.length == 0) {
                return -1;
            }
            long sum = 0;
            for (long g : tokenGapsNanos) {
                sum += g;
            }
            return sum / tokenGapsNanos.length;
        }
    }

    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(5))
            .executor(Executors.newVirtualThreadPerTaskExecutor()).build();
    private final ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor(r -> Thread.ofPlatform().daemon().name("load-cancel")
            .unstarted(r));
    private final String base;
    private final String host;
    private final int port;
    private final String model;
    private final String deciderUrl;
    private final int readTimeoutMs;
    private final String nonce = Long.toString(System.nanoTime() % 1_000_000, 36);

    public LoadClient(String proxyUrl, String model) {
        this(proxyUrl, model, null);
    }

    /** With the decider's query URL, {@link Cancel#WHILE_TRANSFERRING} watches the request's phase there. */
    public LoadClient(String proxyUrl, String model, String deciderUrl) {
        this(proxyUrl, model, deciderUrl, Duration.ofSeconds(150));
    }

    /** As {@link #LoadClient(String, String, String)}, giving up on an answer silent for {@code readTimeout} (then status 0). */
    public LoadClient(String proxyUrl, String model, String deciderUrl, Duration readTimeout) {
        this.readTimeoutMs = Math.toIntExact(readTimeout.toMillis());
        this.base = proxyUrl;
        URI u = URI.create(proxyUrl);
        this.host = u.getHost();
        this.port = u.getPort();
        this.model = model;
        this.deciderUrl = deciderUrl;
    }

    private final java.util.concurrent.atomic.AtomicLong sent = new java.util.concurrent.atomic.AtomicLong();

    /** A fresh id for each send (sent as {@code x-request-id}; request ids must be unique). */
    private String nextId(Request r) {
        return "lc-" + nonce + "-" + sent.incrementAndGet() + "-" + r.index() + (r.colocated() ? "-c" : "");
    }

    /** A deterministic workload: prompts of {@code minWords..maxWords} words, a mix of completions and chats. */
    public static List<Request> workload(long seed, int count, int minWords, int maxWords, int maxTokens, boolean stream) {
        Random rnd = new Random(seed);
        List<Request> out = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            int words = minWords + rnd.nextInt(Math.max(1, maxWords - minWords + 1));
            out.add(new Request(i, i % 3 == 2, prompt(rnd, "Request " + i + ":", words), maxTokens, stream, false, Cancel.NONE, 0));
        }
        return out;
    }

    /** A prompt: {@code head}, then {@code words} words drawn from a small vocabulary. */
    static String prompt(Random rnd, String head, int words) {
        StringBuilder b = new StringBuilder(head);
        for (int w = 0; w < words; w++) {
            b.append(' ').append(WORDS[rnd.nextInt(WORDS.length)]);
        }
        return b.toString();
    }

    /** Sends one request and waits for the whole answer (or for the walk-away), on a connection of its own. */
    public Result send(Request r) {
        return sendAs(nextId(r), r);
    }

    /** As {@link #send(Request)}, under the request id {@code id} (sent as {@code x-request-id}). */
    public Result sendAs(String id, Request r) {
        HttpConnection[] slot = new HttpConnection[1];
        try {
            return send(r, slot, id);
        } finally {
            if (slot[0] != null) {
                slot[0].close();
            }
        }
    }

    /**
     * Sends one request on {@code slot}'s keep-alive connection (opened if there is none, dropped unless the answer was
     * read to its end) and waits for the whole answer, or for the walk-away.
     *
     * <p>A plain blocking HTTP/1.1 client (one socket per slot, chunked and sized bodies, server-sent events read line
     * by line): the load generator shares the benchmark's cores with the system under test, and the JDK's
     * asynchronous client cost ~7 ms of CPU per streamed answer here (selector thread, executor hand-offs), more
     * than the proxy itself.
     */
    Result send(Request r, HttpConnection[] slot) {
        return send(r, slot, nextId(r));
    }

    private Result send(Request r, HttpConnection[] slot, String id) {
        byte[] body = requestBody(r);
        StringBuilder head = new StringBuilder(256).append("POST ").append(r.chat() ? "/v1/chat/completions" : "/v1/completions")
                .append(" HTTP/1.1\r\nhost: ").append(host).append(':').append(port).append("\r\ncontent-type: application/json\r\n")
                .append("content-length: ").append(body.length).append("\r\nx-request-id: ").append(id).append("\r\n");
        if (r.colocated()) {
            head.append("x-orbitkv-route: colocated\r\n");
        }
        head.append("\r\n");
        long t0 = System.nanoTime();
        HttpConnection c = slot[0];
        AtomicBoolean walked = new AtomicBoolean();
        AtomicBoolean answered = new AtomicBoolean();
        java.util.concurrent.ScheduledFuture<?> cancelTask = null;
        try {
            if (c == null || !c.reusable()) {
                if (c != null) {
                    c.close();
                }
                c = HttpConnection.open(host, port, readTimeoutMs);
                slot[0] = c;
            }
            HttpConnection conn = c;
            if (r.cancel() == Cancel.AFTER_DELAY) {
                cancelTask = timer.schedule(() -> {
                    if (!answered.get()) {
                        walked.set(true);
                        conn.close();
                    }
                }, r.cancelMs(), TimeUnit.MILLISECONDS);
            } else if (r.cancel() == Cancel.WHILE_TRANSFERRING && deciderUrl != null) {
                Thread.ofVirtual().start(() -> walkAwayWhileTransferring(id, conn, walked, answered));
            }
            c.write(head.toString().getBytes(StandardCharsets.US_ASCII), body);
            HttpConnection.Response resp = c.readHead();
            String rid = resp.header("x-orbitkv-request-id");
            String h = resp.header("x-orbitkv-handoff-ms");
            double handoff = h == null ? Double.NaN : Double.parseDouble(h);
            if (resp.status() != 200 || !r.stream()) {
                String all = resp.bodyText();
                long t = System.nanoTime() - t0;
                answered.set(true);
                if (resp.status() != 200) {
                    return new Result(r, resp.status(), "", -1, t, rid, handoff, 0, null, all.strip(), walked.get());
                }
                JsonNode n = JSON.readTree(all);
                JsonNode choice = n.path("choices").path(0);
                String text = r.chat() ? choice.path("message").path("content").asText() : choice.path("text").asText();
                return new Result(r, 200, text, t, t, rid, handoff, n.path("orbitkv").path("kv_bytes").asLong(0),
                        n.path("orbitkv").path("mode").asText(null), null, walked.get());
            }
            StringBuilder text = new StringBuilder();
            long ttft = -1;
            long lastToken = -1;
            long[] gaps = new long[16];
            int nGaps = 0;
            long kvBytes = 0;
            String mode = null;
            boolean done = false;
            String line;
            while ((line = resp.readLine()) != null) {
                if (!line.startsWith("data: ")) {
                    continue;
                }
                String data = line.substring(6);
                if (data.equals("[DONE]")) {
                    done = true;
                    break;
                }
                JsonNode n = JSON.readTree(data);
                JsonNode choice = n.path("choices").path(0);
                String piece = r.chat() ? choice.path("delta").path("content").asText("") : choice.path("text").asText("");
                if (!piece.isEmpty()) {
                    long now = System.nanoTime();
                    if (lastToken >= 0) {
                        if (nGaps == gaps.length) {
                            gaps = java.util.Arrays.copyOf(gaps, nGaps * 2);
                        }
                        gaps[nGaps++] = now - lastToken; // inter-token latency, as the client sees it
                    }
                    lastToken = now;
                    if (ttft < 0) {
                        ttft = System.nanoTime() - t0;
                        if (r.cancel() == Cancel.AFTER_FIRST_TOKEN) {
                            walked.set(true);
                            c.close();
                            return new Result(r, 200, piece, ttft, System.nanoTime() - t0, rid, handoff, 0, null, null, true);
                        }
                    }
                    text.append(piece);
                }
                if (n.has("orbitkv")) {
                    kvBytes = n.path("orbitkv").path("kv_bytes").asLong(0);
                    mode = n.path("orbitkv").path("mode").asText(null);
                }
            }
            if (done) {
                resp.drain(); // the chunked body's end, so the connection can carry the next request
            }
            answered.set(true);
            String err = done ? null : "stream ended without [DONE]";
            return new Result(r, 200, text.toString(), ttft, System.nanoTime() - t0, rid, handoff, kvBytes, mode, walked.get() ? null : err,
                    walked.get(), java.util.Arrays.copyOf(gaps, nGaps));
        } catch (IOException | RuntimeException e) {
            answered.set(true);
            if (c != null) {
                c.close();
            }
            // No (whole) response: the request id is the one this client named (the proxy takes x-request-id as it is).
            return new Result(r, 0, "", -1, System.nanoTime() - t0, id, Double.NaN, 0, null, walked.get() ? null : e.toString(), walked.get());
        } finally {
            if (cancelTask != null) {
                cancelTask.cancel(false);
            }
        }
    }

    private byte[] requestBody(Request r) {
        ObjectNode body = JSON.createObjectNode().put("model", model).put("max_tokens", r.maxTokens()).put("stream", r.stream());
        if (r.chat()) {
            body.putArray("messages").addObject().put("role", "user").put("content", r.prompt());
        } else {
            body.put("prompt", r.prompt());
        }
        return body.toString().getBytes(StandardCharsets.UTF_8);
    }

    /**
     * Walks away (closes the connection) as soon as the decider reports the request TRANSFERRING with its prefill's
     * pages known: the KV can be on its way (an order issued ahead of the prefill puts the request in TRANSFERRING while
     * the prefill still computes; walking away then would cancel a prefill, not a transfer).
     */
    private void walkAwayWhileTransferring(String id, HttpConnection conn, AtomicBoolean walked, AtomicBoolean answered) {
        HttpRequest q = HttpRequest.newBuilder(URI.create(deciderUrl + "/requests/" + id)).timeout(Duration.ofSeconds(2)).build();
        long until = System.nanoTime() + 10_000_000_000L;
        while (!answered.get() && System.nanoTime() < until) {
            try {
                HttpResponse<String> s = http.send(q, HttpResponse.BodyHandlers.ofString());
                JsonNode state = s.statusCode() == 200 ? JSON.readTree(s.body()) : null;
                if (state != null && "TRANSFERRING".equals(state.path("phase").asText()) && state.path("source").isObject()) {
                    if (!answered.get()) {
                        walked.set(true);
                        conn.close();
                    }
                    return;
                }
                Thread.sleep(2);
            } catch (Exception e) {
                return;
            }
        }
    }

    /** Runs {@code requests} with at most {@code concurrency} in flight (one thread and connection each); results in request order. */
    public List<Result> run(List<Request> requests, int concurrency, Runnable onEach) throws InterruptedException {
        Result[] out = new Result[requests.size()];
        java.util.concurrent.atomic.AtomicInteger next = new java.util.concurrent.atomic.AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < Math.max(1, Math.min(concurrency, requests.size())); t++) {
            threads.add(Thread.ofPlatform().daemon().name("load-" + t).start(() -> {
                // the instrument reads each token as it comes: on the token path's priority, as the engines and proxies
                io.orbitkv.pd.kv.BulkPriority.latencyCritical(Pipeline.TOKEN_PATH_NICE);
                HttpConnection[] slot = new HttpConnection[1];
                try {
                    for (int k = next.getAndIncrement(); k < requests.size(); k = next.getAndIncrement()) {
                        out[k] = send(requests.get(k), slot);
                        onEach.run();
                    }
                } finally {
                    if (slot[0] != null) {
                        slot[0].close();
                    }
                }
            }));
        }
        for (Thread t : threads) {
            t.join();
        }
        return List.of(out);
    }

    /**
     * Open loop: request {@code k} is sent at {@code offsetsNanos[k]} after the start, each on a connection of its own,
     * whether or not earlier ones were answered (Poisson arrivals: a server that falls behind sees its queue grow, as in
     * production; a closed loop would slow its clients down instead). Returns the results in request order.
     */
    public List<Result> runOpen(List<Request> requests, long[] offsetsNanos, Runnable onEach) throws InterruptedException {
        if (offsetsNanos.length != requests.size()) {
            throw new IllegalArgumentException("one arrival time per request: " + offsetsNanos.length + " for " + requests.size());
        }
        Result[] out = new Result[requests.size()];
        List<Thread> threads = new ArrayList<>();
        long t0 = System.nanoTime();
        for (int k = 0; k < requests.size(); k++) {
            long wait;
            while ((wait = t0 + offsetsNanos[k] - System.nanoTime()) > 0) {
                java.util.concurrent.locks.LockSupport.parkNanos(wait);
            }
            int i = k;
            threads.add(Thread.ofPlatform().daemon().name("open-" + k).start(() -> { // as the closed loop reads: the same instrument
                io.orbitkv.pd.kv.BulkPriority.latencyCritical(Pipeline.TOKEN_PATH_NICE);
                out[i] = send(requests.get(i));
                onEach.run();
            }));
        }
        for (Thread t : threads) {
            t.join();
        }
        return List.of(out);
    }

    @Override
    public void close() {
        timer.shutdownNow();
        http.close();
    }
}
