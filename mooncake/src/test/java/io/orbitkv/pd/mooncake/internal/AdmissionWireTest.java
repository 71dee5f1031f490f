package io.orbitkv.pd.mooncake.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.tcp.wire.FrameException;
import io.orbitkv.pd.transport.tcp.wire.Wire;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

class AdmissionWireTest {

    private static AdmissionWire.Frame roundTrip(byte type, int push, ByteBuffer body) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        AdmissionWire.write(out, type, push, body);
        return AdmissionWire.read(new ByteArrayInputStream(out.toByteArray()), null, 1_000_000_000L);
    }

    @Test
    void helloOkCarriesTheRegionsAsRegistered() throws Exception {
        AdmissionWire.HelloOk h = new AdmissionWire.HelloOk("decode-0", 201, "10.0.0.7:15668", "rdma",
                List.of(new long[] {0x7f00_0000_0000L, 1 << 20}, new long[] {0x7f00_1000_0000L, 1 << 20}));
        AdmissionWire.Frame f = roundTrip(AdmissionWire.HELLO_OK, 0, AdmissionWire.helloOk(h));
        assertThat(f.type()).isEqualTo(AdmissionWire.HELLO_OK);
        AdmissionWire.HelloOk back = AdmissionWire.parseHelloOk(f.body());
        assertThat(back.engineId()).isEqualTo("decode-0");
        assertThat(back.instanceEpoch()).isEqualTo(201);
        assertThat(back.segment()).isEqualTo("10.0.0.7:15668");
        assertThat(back.protocol()).isEqualTo("rdma");
        assertThat(back.base(1)).isEqualTo(0x7f00_1000_0000L);
        assertThat(back.length(0)).isEqualTo(1 << 20);
    }

    @Test
    void errorAndStopCarryTheKindAndReason() throws Exception {
        AdmissionWire.Frame f = roundTrip(AdmissionWire.STOP, 7, AdmissionWire.error(TransferError.STALE_EPOCH, "lease L epoch 3 was released"));
        assertThat(f.push()).isEqualTo(7);
        TransferException e = AdmissionWire.parseError(f.body(), "decode-0@201");
        assertThat(e.kind()).isEqualTo(TransferError.STALE_EPOCH);
        assertThat(e.reason()).isEqualTo("STALE_EPOCH: refused by decode-0@201: lease L epoch 3 was released");
        assertThat(Wire.parseLong(roundTrip(AdmissionWire.END, 7, Wire.longBody(1L << 28)).body(), "END")).isEqualTo(1L << 28);
        assertThat(roundTrip(AdmissionWire.BEGIN_OK, 7, null).body().remaining()).isZero();
    }

    @Test
    void brokenStreamsAreRefusedWithTheReason() throws Exception {
        byte[] junk = new byte[64];
        new Random(1).nextBytes(junk);
        assertThatThrownBy(() -> AdmissionWire.read(new ByteArrayInputStream(junk), null, 1000)).isInstanceOf(FrameException.class)
                .hasMessageContaining("not an OrbitKV mooncake admission stream");
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        AdmissionWire.write(out, AdmissionWire.END, 1, Wire.longBody(5));
        byte[] whole = out.toByteArray();
        byte[] cut = java.util.Arrays.copyOf(whole, whole.length - 3);
        assertThatThrownBy(() -> AdmissionWire.read(new ByteArrayInputStream(cut), null, 1000)).isInstanceOf(EOFException.class);
        ByteBuffer big = ByteBuffer.wrap(whole.clone());
        big.putInt(12, AdmissionWire.MAX_BODY + 1);
        assertThatThrownBy(() -> AdmissionWire.read(new ByteArrayInputStream(big.array()), null, 1000)).isInstanceOf(FrameException.class)
                .hasMessageContaining("the limit is " + AdmissionWire.MAX_BODY);
        ByteBuffer tcp = ByteBuffer.allocate(24);
        Wire.putHeader(tcp, Wire.HELLO, 0, 0, 0);
        assertThatThrownBy(() -> AdmissionWire.read(new ByteArrayInputStream(tcp.array()), null, 1000))
                .as("the tcp transport's stream is not taken for ours").isInstanceOf(FrameException.class);
        assertThat(AdmissionWire.read(new ByteArrayInputStream(new byte[0]), null, 1000)).as("closed between frames").isNull();
        assertThatThrownBy(() -> AdmissionWire.parseHelloOk(ByteBuffer.wrap(new byte[] {0, 1, 'x'}))).isInstanceOf(FrameException.class);
    }
}
