package io.orbitkv.pd.mooncake.te;

/** The Mooncake Transfer Engine cannot be used here (no library configured, or it does not load); the message says which. */
public final class MooncakeUnavailableException extends io.orbitkv.pd.transport.TransportUnavailableException {

    public MooncakeUnavailableException(String reason) {
        super(reason);
    }
}
