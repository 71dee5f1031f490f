package io.orbitkv.pd.gpu.cuda;

/** CUDA cannot be used here (no driver, no device, or a driver too old for a call); the message says which. */
public final class CudaUnavailableException extends io.orbitkv.pd.transport.TransportUnavailableException {

    public CudaUnavailableException(String reason) {
        super(reason);
    }
}
