package io.orbitkv.pd.harness;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;

/**
 * One blocking HTTP/1.1 keep-alive connection of the load client: writes a request, reads the status line and headers,
 * then the body as lines (server-sent events) or whole, sized by {@code content-length} or chunked. Just what the
 * proxy answers; not a general HTTP client. {@link #close()} from another thread breaks a blocked read (a client
 * walking away).
 */
final class HttpConnection implements AutoCloseable {

    private static final int MAX_LINE = 1 << 20;

    private final Socket socket;
    private final InputStream in;
    private final OutputStream out;
    private volatile boolean closed;
    private boolean clean = true;

    private HttpConnection(Socket socket) throws IOException {
        this.socket = socket;
        this.in = new BufferedInputStream(socket.getInputStream(), 64 << 10);
        this.out = socket.getOutputStream();
    }

    static HttpConnection open(String host, int port, int readTimeoutMs) throws IOException {
        Socket s = new Socket();
        try {
            s.setTcpNoDelay(true);
            s.setSoTimeout(readTimeoutMs);
            s.connect(new InetSocketAddress(host, port), 5_000);
            return new HttpConnection(s);
        } catch (IOException e) {
            s.close();
            throw e;
        }
    }

    /** Whether the previous answer was read to its end and the server kept the connection open. */
    boolean reusable() {
        return clean && !closed && !socket.isClosed();
    }

    void write(byte[] head, byte[] body) throws IOException {
        clean = false;
        out.write(head);
        out.write(body);
        out.flush();
    }

    /** Reads the status line and the headers; the body is read through the returned response. */
    Response readHead() throws IOException {
        String status = headLine(in);
        if (status == null) {
            throw new EOFException("connection closed before the status line");
        }
        String[] parts = status.split(" ", 3);
        if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
            throw new IOException("not an HTTP/1.x status line: " + status);
        }
        Map<String, String> headers = new HashMap<>();
        for (String line = headLine(in); line != null && !line.isEmpty(); line = headLine(in)) {
            int colon = line.indexOf(':');
            if (colon > 0) {
                headers.put(line.substring(0, colon).trim().toLowerCase(Locale.ROOT), line.substring(colon + 1).trim());
            }
        }
        return new Response(Integer.parseInt(parts[1]), headers);
    }

    /** An answer being read: its status, headers, and its body, in lines or whole. */
    final class Response {
        private final int status;
        private final Map<String, String> headers;
        private final boolean chunked;
        private long remaining;
        private boolean ended;

        private Response(int status, Map<String, String> headers) {
            this.status = status;
            this.headers = headers;
            this.chunked = "chunked".equalsIgnoreCase(headers.get("transfer-encoding"));
            String len = headers.get("content-length");
            this.remaining = chunked ? 0 : len == null ? -1 : Long.parseLong(len);
            this.ended = !chunked && remaining == 0;
        }

        int status() {
            return status;
        }

        String header(String name) {
            return headers.get(name.toLowerCase(Locale.ROOT));
        }

        /** The next body byte, or -1 at the body's end. */
        private int read() throws IOException {
            if (ended) {
                return -1;
            }
            if (chunked && remaining == 0) {
                if (!firstChunk) {
                    headLine(in); // the CRLF that ends the previous chunk
                }
                firstChunk = false;
                String size = headLine(in);
                if (size == null) {
                    throw new EOFException("connection closed inside a chunked body");
                }
                int semi = size.indexOf(';');
                remaining = Long.parseLong((semi < 0 ? size : size.substring(0, semi)).trim(), 16);
                if (remaining == 0) {
                    for (String t = headLine(in); t != null && !t.isEmpty(); t = headLine(in)) {
                        // trailers: none expected
                    }
                    ended = true;
                    return -1;
                }
            }
            if (remaining == 0) {
                ended = true;
                return -1;
            }
            int b = in.read();
            if (b < 0) {
                if (remaining > 0 || chunked) {
                    throw new EOFException("connection closed inside the body");
                }
                ended = true; // no length: the body ends with the connection
                return -1;
            }
            if (remaining > 0) {
                remaining--;
            }
            return b;
        }

        private boolean firstChunk = true;

        /** The next line of the body (without its line end), or null at the body's end. */
        String readLine() throws IOException {
            ByteArrayOutputStream line = new ByteArrayOutputStream(256);
            int b;
            while ((b = read()) >= 0) {
                if (b == '\n') {
                    return stripCr(line);
                }
                if (line.size() >= MAX_LINE) {
                    throw new IOException("a body line longer than " + MAX_LINE + " bytes");
                }
                line.write(b);
            }
            return line.size() == 0 ? null : stripCr(line);
        }

        /** The whole body as text. */
        String bodyText() throws IOException {
            ByteArrayOutputStream all = new ByteArrayOutputStream(1024);
            int b;
            while ((b = read()) >= 0) {
                all.write(b);
            }
            finish();
            return all.toString(StandardCharsets.UTF_8);
        }

        /** Reads to the body's end so that the connection can carry the next request. */
        void drain() throws IOException {
            while (read() >= 0) {
                // rest of the body
            }
            finish();
        }

        private void finish() {
            clean = ended && !"close".equalsIgnoreCase(headers.get("connection"));
        }
    }

    private static String stripCr(ByteArrayOutputStream line) {
        String s = line.toString(StandardCharsets.UTF_8);
        return s.endsWith("\r") ? s.substring(0, s.length() - 1) : s;
    }

    /** A CRLF-terminated header line, or null at the end of the stream. */
    private static String headLine(InputStream in) throws IOException {
        StringBuilder b = new StringBuilder(64);
        int c;
        while ((c = in.read()) >= 0) {
            if (c == '\n') {
                int n = b.length();
                return n > 0 && b.charAt(n - 1) == '\r' ? b.substring(0, n - 1) : b.toString();
            }
            if (b.length() >= MAX_LINE) {
                throw new IOException("a header line longer than " + MAX_LINE + " bytes");
            }
            b.append((char) c);
        }
        return b.length() == 0 ? null : b.toString();
    }

    @Override
    public void close() {
        closed = true;
        try {
            socket.close();
        } catch (IOException e) {
            // closing anyway
        }
    }
}
