package io.orbitkv.pd.dashboard;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.WebSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A real headless Chromium (Debian's {@code chromium} package) driven over the DevTools protocol: load a page, run
 * JavaScript in it, take a full-page screenshot. Started per test, closed with its whole process tree.
 */
final class Chromium implements AutoCloseable {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Pattern DEVTOOLS = Pattern.compile("DevTools listening on (ws://[^\\s]+)");
    private static final List<String> NAMES = List.of("chromium", "chromium-browser", "google-chrome");

    private final Process process;
    private final List<ProcessHandle> tree = new ArrayList<>();
    private final WebSocket socket;
    private final Map<Integer, CompletableFuture<JsonNode>> pending = new ConcurrentHashMap<>();
    private final AtomicInteger ids = new AtomicInteger();

    /** The browser on PATH, if any. */
    static Optional<Path> locate() {
        for (String dir : System.getenv().getOrDefault("PATH", "").split(":")) {
            for (String name : NAMES) {
                Path p = Path.of(dir, name);
                if (Files.isExecutable(p)) {
                    return Optional.of(p);
                }
            }
        }
        return Optional.empty();
    }

    /**
     * The browser on PATH, or Debian's {@code chromium} installed with {@code apt-get install -y chromium} (after an
     * {@code apt-get update} if the first try fails). Empty, with the reason in {@code why}, when that fails (no root,
     * no network, not Debian).
     */
    static Optional<Path> locateOrInstall(StringBuilder why) throws InterruptedException {
        Optional<Path> found = locate();
        if (found.isPresent()) {
            return found;
        }
        for (List<String> cmd : List.of(List.of("apt-get", "install", "-y", "-q", "chromium"), List.of("apt-get", "update", "-q"),
                List.of("apt-get", "install", "-y", "-q", "chromium"))) {
            try {
                ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true)
                        .redirectOutput(Path.of("target", "chromium-install.log").toFile());
                pb.environment().put("DEBIAN_FRONTEND", "noninteractive");
                Process p = pb.start();
                if (!p.waitFor(10, TimeUnit.MINUTES)) {
                    p.destroyForcibly();
                    why.append(String.join(" ", cmd)).append(": timed out; ");
                } else if (p.exitValue() != 0) {
                    why.append(String.join(" ", cmd)).append(": exit ").append(p.exitValue()).append("; ");
                }
            } catch (IOException e) {
                why.append(String.join(" ", cmd)).append(": ").append(e.getMessage()).append("; ");
                break;
            }
            found = locate();
            if (found.isPresent()) {
                return found;
            }
        }
        why.append("see target/chromium-install.log");
        return Optional.empty();
    }

    Chromium(Path binary, Path profile, Path log) throws Exception {
        Files.createDirectories(profile);
        process = new ProcessBuilder(binary.toString(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--user-data-dir=" + profile,
                "--window-size=1440,1000", "about:blank").redirectOutput(log.toFile()).start();
        CompletableFuture<String> endpoint = new CompletableFuture<>();
        Thread.ofPlatform().daemon().name("chromium-stderr").start(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8));
                 PrintWriter w = new PrintWriter(Files.newBufferedWriter(log.resolveSibling(log.getFileName() + ".stderr")), true)) {
                for (String line; (line = r.readLine()) != null; ) {
                    w.println(line);
                    Matcher m = DEVTOOLS.matcher(line);
                    if (m.find()) {
                        endpoint.complete(m.group(1));
                    }
                }
            } catch (IOException e) {
                endpoint.completeExceptionally(e);
            }
            endpoint.completeExceptionally(new IllegalStateException("chromium exited before DevTools listened"));
        });
        try {
            URI browser = URI.create(endpoint.get(60, TimeUnit.SECONDS));
            HttpClient http = HttpClient.newHttpClient();
            String list = http.send(HttpRequest.newBuilder(URI.create("http://" + browser.getAuthority() + "/json/list")).build(),
                    HttpResponse.BodyHandlers.ofString()).body();
            String page = null;
            for (JsonNode t : JSON.readTree(list)) {
                if ("page".equals(t.path("type").asText())) {
                    page = t.path("webSocketDebuggerUrl").asText();
                }
            }
            if (page == null) {
                throw new IllegalStateException("chromium has no page target: " + list);
            }
            socket = http.newWebSocketBuilder().buildAsync(URI.create(page), new Listener()).get(30, TimeUnit.SECONDS);
            process.toHandle().descendants().forEach(tree::add);
        } catch (Exception e) {
            close();
            throw e;
        }
    }

    private final class Listener implements WebSocket.Listener {
        private final StringBuilder buffer = new StringBuilder();

        @Override
        public CompletionStage<?> onText(WebSocket ws, CharSequence data, boolean last) {
            buffer.append(data);
            if (last) {
                try {
                    JsonNode msg = JSON.readTree(buffer.toString());
                    CompletableFuture<JsonNode> f = msg.has("id") ? pending.remove(msg.get("id").asInt()) : null;
                    if (f != null) {
                        if (msg.has("error")) {
                            f.completeExceptionally(new IllegalStateException("DevTools error: " + msg.get("error")));
                        } else {
                            f.complete(msg.path("result"));
                        }
                    }
                } catch (IOException e) {
                    // not JSON: ignore
                }
                buffer.setLength(0);
            }
            ws.request(1);
            return null;
        }
    }

    /** Sends one DevTools command and waits for its result. */
    JsonNode call(String method, ObjectNode params) throws Exception {
        return call(method, params, 60);
    }

    private JsonNode call(String method, ObjectNode params, int timeoutSeconds) throws Exception {
        int id = ids.incrementAndGet();
        CompletableFuture<JsonNode> f = new CompletableFuture<>();
        pending.put(id, f);
        ObjectNode msg = JSON.createObjectNode().put("id", id).put("method", method);
        msg.set("params", params == null ? JSON.createObjectNode() : params);
        socket.sendText(msg.toString(), true).get(30, TimeUnit.SECONDS);
        return f.get(timeoutSeconds, TimeUnit.SECONDS);
    }

    void open(String url) throws Exception {
        call("Page.enable", null);
        call("Emulation.setDeviceMetricsOverride", JSON.createObjectNode().put("width", 1440).put("height", 1000).put("deviceScaleFactor", 1)
                .put("mobile", false));
        call("Page.navigate", JSON.createObjectNode().put("url", url));
    }

    /** Evaluates {@code expression} in the page; the value as JSON (null when undefined). */
    JsonNode eval(String expression) throws Exception {
        JsonNode r = call("Runtime.evaluate", JSON.createObjectNode().put("expression", expression).put("returnByValue", true)
                .put("awaitPromise", true));
        if (r.has("exceptionDetails")) {
            throw new IllegalStateException("page threw: " + r.get("exceptionDetails"));
        }
        return r.path("result").path("value");
    }

    /** A PNG of the whole page (the viewport resized to the document's height). */
    void screenshot(Path png) throws Exception {
        int height = Math.min(6000, Math.max(800, eval("Math.ceil(document.documentElement.scrollHeight)").asInt()));
        call("Emulation.setDeviceMetricsOverride", JSON.createObjectNode().put("width", 1440).put("height", height).put("deviceScaleFactor", 1)
                .put("mobile", false));
        JsonNode shot = call("Page.captureScreenshot", JSON.createObjectNode().put("format", "png").put("captureBeyondViewport", true));
        Files.createDirectories(png.toAbsolutePath().getParent());
        Files.write(png, Base64.getDecoder().decode(shot.path("data").asText()));
    }

    @Override
    public void close() {
        if (socket != null) {
            try {
                call("Browser.close", null, 3);
            } catch (Exception ignored) {
                // the browser may close the socket before it answers
            }
            socket.abort();
        }
        process.toHandle().descendants().forEach(tree::add);
        process.destroy();
        try {
            if (!process.waitFor(5, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        tree.forEach(ProcessHandle::destroyForcibly);
    }
}
