package io.orbitkv.pd.transport.tcp.wire;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.Pushes;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

class WireTest {

    private final KvGeometry g = KvTestData.small(32, 4096);
    private final PushRequest r = Pushes.signed("req-7", 2, "lease-7", 9, "decode-0", 4, List.of(run(5, 3), run(100, 1)));

    @Test
    void beginRoundTripsEverythingTheReceiverChecks() throws Exception {
        Wire.Begin b = Wire.parseBegin(Wire.begin(r, g, 12345), 100);
        assertThat(b.request()).usingRecursiveComparison().isEqualTo(r);
        assertThat(b.request().token()).isEqualTo(r.token());
        assertThat(b.geometry()).isEqualTo(g.withNumBlocks(1));
        assertThat(b.stripeBytes()).isEqualTo(12345);
    }

    @Test
    void aBeginCarriesThePrefillsFirstTokenWhenItHasOne() throws Exception {
        PushRequest withToken = r.withFirstToken(-17);
        Wire.Begin b = Wire.parseBegin(Wire.begin(withToken, g, 1), 100);
        assertThat(b.request().firstToken()).isEqualTo(-17);
        assertThat(b.request()).usingRecursiveComparison().isEqualTo(withToken);
        assertThat(Wire.parseBegin(Wire.begin(r, g, 1), 100).request().firstToken()).isNull();
        ByteBuffer extra = ByteBuffer.allocate(Wire.begin(r, g, 1).remaining() + 3).put(Wire.begin(r, g, 1)).put(new byte[] {1, 2, 3}).flip();
        assertThatThrownBy(() -> Wire.parseBegin(extra, 100)).isInstanceOf(FrameException.class);
    }

    @Test
    void headersAreCheckedBeforeAnythingIsTrusted() throws FrameException {
        ByteBuffer h = ByteBuffer.allocate(Wire.HEADER_BYTES);
        Wire.putHeader(h, Wire.WRITE, 3, 20, 4096);
        assertThat(parse(h)).isEqualTo(new Wire.Header(Wire.WRITE, 3, 20, 4096));

        assertThatThrownBy(() -> Wire.parseHeader(ByteBuffer.wrap("GET / HTTP/1.1\r\nHost: x\r\n\r\n".getBytes())))
                .isInstanceOf(FrameException.class).hasMessageContaining("bad magic 0x47455420").hasMessageContaining("not an OrbitKV transfer stream");
        ByteBuffer v2 = header(Wire.BEGIN, 0, 0);
        v2.put(4, (byte) 2);
        assertThatThrownBy(() -> Wire.parseHeader(v2)).hasMessage("unsupported wire version 2 (this worker speaks 1)");
        ByteBuffer pipelined = header(Wire.BEGIN, 0, 0);
        pipelined.putShort(6, (short) Wire.FLAG_PIPELINED);
        assertThat(Wire.parseHeader(pipelined).pipelined()).isTrue();
        ByteBuffer flags = header(Wire.BEGIN, 0, 0);
        flags.putShort(6, (short) 2);
        assertThatThrownBy(() -> Wire.parseHeader(flags)).hasMessage("flags 2 set in a BEGIN frame; version 1 defines only bit 0 of BEGIN (pipelined)");
        ByteBuffer writeFlags = header(Wire.END, 8, 0);
        writeFlags.putShort(6, (short) Wire.FLAG_PIPELINED);
        assertThatThrownBy(() -> Wire.parseHeader(writeFlags)).hasMessageStartingWith("flags 1 set in a END frame");
        assertThatThrownBy(() -> Wire.parseHeader(header(Wire.BEGIN, -5, 0))).hasMessageContaining("negative body length");
        assertThatThrownBy(() -> Wire.parseHeader(header(Wire.END, 8, 100)))
                .hasMessage("payload length 100 in a END frame (only WRITE frames carry payload)");
    }

    @Test
    void truncatedAndForgedBodiesAreRefusedWithTheField() {
        ByteBuffer full = Wire.begin(r, g, 1);
        ByteBuffer cut = full.slice(0, full.remaining() - 5);
        assertThatThrownBy(() -> Wire.parseBegin(cut, 100)).isInstanceOf(FrameException.class).hasMessageContaining("BEGIN.token");
        ByteBuffer many = Wire.begin(r, g, 1);
        assertThatThrownBy(() -> Wire.parseBegin(many, 1)).hasMessage("BEGIN: 2 destination runs, the limit is 1");
        ByteBuffer longString = ByteBuffer.allocate(10).putShort((short) 60000).flip();
        assertThatThrownBy(() -> Wire.getString(longString, "HELLO.sender")).hasMessage("HELLO.sender: 60000 bytes, more than the limit of 4096");
        ByteBuffer badUtf8 = ByteBuffer.allocate(4).putShort((short) 2).put((byte) 0xC3).put((byte) 0x28).flip();
        assertThatThrownBy(() -> Wire.getString(badUtf8, "HELLO.sender")).hasMessage("HELLO.sender: not valid UTF-8");
        ByteBuffer trailing = ByteBuffer.allocate(12).putLong(5).putInt(0).flip();
        assertThatThrownBy(() -> Wire.parseLong(trailing, "END")).hasMessage("4 unexpected trailing bytes in a END body");
    }

    @Test
    void anInvalidLayoutInAWellFormedBeginIsALayoutRefusalNotAProtocolError() {
        // Patch the page bytes of an otherwise valid BEGIN: SEPARATE BF16 16x8x128 must be 32768.
        ByteBuffer b = Wire.begin(r, g, 1);
        int layoutAt = 2 + "req-7".length() + 2 + "req-7/a2".length() + 4 + 2 + "lease-7".length() + 8 + 2 + "decode-0".length() + 8
                + 2 + "test-sender".length();
        b.putInt(layoutAt + 18, 1000);
        assertThatThrownBy(() -> Wire.parseBegin(b, 100)).isInstanceOf(TransferException.class)
                .satisfies(e -> assertThat(((TransferException) e).kind()).isEqualTo(TransferError.LAYOUT_MISMATCH))
                .hasMessageContaining("sender's layout is invalid: layout.page_bytes");
    }

    @Test
    void randomBytesNeverEscapeAsAnythingButARefusal() {
        Random rnd = new Random(1);
        for (int i = 0; i < 5_000; i++) {
            byte[] junk = new byte[rnd.nextInt(120)];
            rnd.nextBytes(junk);
            if (i % 3 == 0 && junk.length > 8) {
                // Mostly-valid BEGIN bodies with a few bytes flipped reach deeper into the decoder.
                ByteBuffer valid = Wire.begin(r, g, 1);
                junk = new byte[valid.remaining()];
                valid.get(junk);
                for (int k = 0; k < 3; k++) {
                    junk[rnd.nextInt(junk.length)] = (byte) rnd.nextInt();
                }
            }
            byte[] bytes = junk;
            for (Decoder d : List.<Decoder>of(b -> Wire.parseHeader(b), b -> Wire.parseBegin(b, 1000), Wire::parseHello, Wire::parseHelloOk,
                    b -> Wire.parseError(b, "peer"))) {
                try {
                    d.decode(ByteBuffer.wrap(bytes));
                } catch (FrameException | TransferException expected) {
                    // refused with a reason
                } catch (java.nio.BufferUnderflowException e) {
                    if (bytes.length >= Wire.HEADER_BYTES) {
                        throw new AssertionError("decoder read past a body of " + bytes.length + " bytes", e);
                    }
                }
            }
        }
    }

    private interface Decoder {
        Object decode(ByteBuffer b) throws FrameException;
    }

    private static ByteBuffer header(byte type, int body, long payload) {
        ByteBuffer h = ByteBuffer.allocate(Wire.HEADER_BYTES);
        Wire.putHeader(h, type, 0, body, payload);
        return h.flip();
    }

    private static Wire.Header parse(ByteBuffer h) {
        try {
            return Wire.parseHeader(h.flip());
        } catch (FrameException e) {
            throw new AssertionError(e);
        }
    }
}
