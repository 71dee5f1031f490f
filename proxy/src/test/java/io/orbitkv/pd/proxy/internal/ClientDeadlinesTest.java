package io.orbitkv.pd.proxy.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.vertx.core.Vertx;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.http.HttpServer;
import io.vertx.core.http.HttpServerOptions;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The proxy's deadlines for clients on a real Vert.x server and real sockets: silent connections, stalled heads and
 * stalled bodies are cut; a slow answer and keep-alive requests are not.
 */
class ClientDeadlinesTest {

    private static final Duration IDLE = Duration.ofMillis(300);
    private static final Duration BODY = Duration.ofMillis(300);

    private Vertx vertx;
    private HttpServer server;

    @BeforeEach
    void start() throws Exception {
        vertx = Vertx.vertx();
        ClientDeadlines deadlines = new ClientDeadlines(vertx, IDLE, BODY);
        server = vertx.createHttpServer(new HttpServerOptions().setHost("127.0.0.1").setPort(0).setHttp2ClearTextEnabled(false)).connectionHandler(deadlines::opened)
                .requestHandler(req -> {
                    Runnable done = deadlines.started(req, () -> {
                        req.response().setStatusCode(408).end("body too slow");
                        req.connection().close();
                    });
                    req.response().endHandler(v -> done.run());
                    Buffer body = Buffer.buffer();
                    req.handler(body::appendBuffer);
                    // the answer takes longer than the idle deadline: a request being answered is never cut
                    req.endHandler(v -> vertx.setTimer(2 * IDLE.toMillis(), t -> req.response().end("ok " + body.length())));
                }).listen().toCompletionStage().toCompletableFuture().get();
    }

    @AfterEach
    void stop() throws Exception {
        vertx.close().toCompletionStage().toCompletableFuture().get();
    }

    @Test
    void aSilentConnectionIsClosed() throws Exception {
        try (Socket s = connect()) {
            assertThat(readAll(s.getInputStream())).as("nothing sent: closed without an answer").isEmpty();
        }
    }

    @Test
    void aRequestHeadThatStallsIsClosed() throws Exception {
        try (Socket s = connect()) {
            s.getOutputStream().write("POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-len".getBytes(StandardCharsets.US_ASCII));
            assertThat(readAll(s.getInputStream())).isEmpty();
        }
    }

    @Test
    void aBodyThatStallsGets408() throws Exception {
        try (Socket s = connect()) {
            s.getOutputStream().write("POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\"".getBytes(StandardCharsets.US_ASCII));
            assertThat(readAll(s.getInputStream())).startsWith("HTTP/1.1 408").contains("body too slow");
        }
    }

    @Test
    void keepAliveRequestsAndSlowAnswersAreServed() throws Exception {
        try (Socket s = connect()) {
            OutputStream out = s.getOutputStream();
            InputStream in = s.getInputStream();
            for (int i = 0; i < 3; i++) {
                out.write("POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}".getBytes(StandardCharsets.US_ASCII));
                out.flush();
                assertThat(readResponse(in)).as("answer %d on one connection", i).startsWith("HTTP/1.1 200").endsWith("ok 2");
            }
            // then idle: closed
            assertThat(readAll(in)).isEmpty();
        }
    }

    private Socket connect() throws Exception {
        Socket s = new Socket("127.0.0.1", server.actualPort());
        s.setSoTimeout(10_000); // far above the deadlines: a read that times out fails the test
        return s;
    }

    /** Everything until the server closes the connection. */
    private static String readAll(InputStream in) throws Exception {
        return new String(in.readAllBytes(), StandardCharsets.US_ASCII);
    }

    /** One response with a content-length body. */
    private static String readResponse(InputStream in) throws Exception {
        StringBuilder head = new StringBuilder();
        while (!head.toString().endsWith("\r\n\r\n")) {
            int c = in.read();
            if (c < 0) {
                break;
            }
            head.append((char) c);
        }
        int len = 0;
        for (String line : head.toString().split("\r\n")) {
            if (line.toLowerCase().startsWith("content-length:")) {
                len = Integer.parseInt(line.substring(15).strip());
            }
        }
        return head.toString().strip() + "\r\n" + new String(in.readNBytes(len), StandardCharsets.US_ASCII);
    }
}
