package io.orbitkv.pd.transport.tcp.wire;

import java.io.IOException;

/** Bytes on a connection that break the wire format: the connection is closed with this reason; nothing else is affected. */
public final class FrameException extends IOException {

    public FrameException(String message) {
        super(message);
    }
}
