package io.orbitkv.pd.transport;

/**
 * A transport cannot run on this machine (no driver, no device, no library); the message says why. Thrown by
 * {@link KvTransportProvider#open}; the worker reports it as a configuration error naming the transport.
 */
public class TransportUnavailableException extends IllegalStateException {

    public TransportUnavailableException(String reason) {
        super(reason);
    }
}
