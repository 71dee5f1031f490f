package io.orbitkv.pd.engine.client.api;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;
import java.nio.channels.WritableByteChannel;

/**
 * The engine API's framing: a 4-byte big-endian length, then that many bytes of one UTF-8 JSON object. One frame is
 * one message; a writer puts a whole frame in one write, so a reader needs no more than two reads per message and no
 * delimiter scanning. Lengths of 0 or above the limit, and bodies that are not one JSON object, end the connection
 * ({@link ApiException#BAD_FRAME}, {@link ApiException#TOO_LARGE}): after them the stream cannot be trusted.
 */
public final class ApiFrames {

    /** The default largest frame body: a fact with 100,000 block ids fits; a decision is far smaller. */
    public static final int DEFAULT_MAX_BYTES = 1 << 20;

    private static final ObjectMapper JSON = new ObjectMapper();

    static {
        JSON.getFactory().setStreamReadConstraints(StreamReadConstraints.builder().maxNestingDepth(16).maxStringLength(1 << 20).build());
    }

    private ApiFrames() {
    }

    public static ObjectMapper json() {
        return JSON;
    }

    public static ObjectNode object() {
        return JSON.createObjectNode();
    }

    /** The bytes of one frame carrying {@code message}. */
    public static ByteBuffer encode(JsonNode message) {
        byte[] body;
        try {
            body = JSON.writeValueAsBytes(message);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("cannot encode " + message.getClass().getSimpleName() + ": " + e.getMessage(), e);
        }
        ByteBuffer b = ByteBuffer.allocate(4 + body.length);
        b.putInt(body.length).put(body).flip();
        return b;
    }

    /** Writes one whole frame (callers serialize writers: frames must not interleave). */
    public static void write(WritableByteChannel ch, JsonNode message) throws IOException {
        ByteBuffer b = encode(message);
        while (b.hasRemaining()) {
            ch.write(b);
        }
    }

    /**
     * Reads one frame; null at a clean end of stream (between frames).
     *
     * @throws EOFException  when the stream ends inside a frame
     * @throws ApiException  {@code too_large} / {@code bad_frame}: the connection must end
     */
    public static ObjectNode read(ReadableByteChannel ch, ByteBuffer header, int maxBytes) throws IOException, ApiException {
        header.clear();
        if (!fill(ch, header, true)) {
            return null;
        }
        int len = header.getInt(0);
        if (len <= 0) {
            throw new ApiException(ApiException.BAD_FRAME, null, "frame length " + Integer.toUnsignedString(len) + ": a frame is a 4-byte big-endian"
                    + " length (1.." + maxBytes + ") and that many bytes of UTF-8 JSON");
        }
        if (len > maxBytes) {
            throw new ApiException(ApiException.TOO_LARGE, null, "frame of " + len + " bytes: the limit is " + maxBytes);
        }
        ByteBuffer body = ByteBuffer.allocate(len);
        fill(ch, body, false);
        JsonNode node;
        try {
            node = JSON.readTree(body.array());
        } catch (IOException e) {
            throw new ApiException(ApiException.BAD_FRAME, null, "frame body is not JSON: " + firstLine(e.getMessage()));
        }
        if (!(node instanceof ObjectNode o)) {
            throw new ApiException(ApiException.BAD_FRAME, null, "frame body must be one JSON object, got " + (node == null ? "nothing" : node.getNodeType()));
        }
        return o;
    }

    private static boolean fill(ReadableByteChannel ch, ByteBuffer b, boolean mayEnd) throws IOException {
        while (b.hasRemaining()) {
            int n = ch.read(b);
            if (n < 0) {
                if (mayEnd && b.position() == 0) {
                    return false;
                }
                throw new EOFException("stream ended inside a frame (" + b.position() + " of " + b.limit() + " bytes)");
            }
        }
        return true;
    }

    private static String firstLine(String s) {
        if (s == null) {
            return "";
        }
        int nl = s.indexOf('\n');
        return nl < 0 ? s : s.substring(0, nl);
    }
}
