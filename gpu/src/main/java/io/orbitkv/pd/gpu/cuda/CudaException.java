package io.orbitkv.pd.gpu.cuda;

/**
 * A CUDA driver call that returned an error: the function, the {@code CUresult} code, its name and the driver's
 * description, e.g. {@code cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory (allocating 1 GiB)}.
 */
public final class CudaException extends RuntimeException {

    /** {@code CUDA_ERROR_INVALID_VALUE}. */
    public static final int INVALID_VALUE = 1;
    /** {@code CUDA_ERROR_OUT_OF_MEMORY}. */
    public static final int OUT_OF_MEMORY = 2;
    /** {@code CUDA_ERROR_NO_DEVICE}. */
    public static final int NO_DEVICE = 100;
    /** {@code CUDA_ERROR_NOT_READY}: not an error for {@code cuEventQuery}, only "not yet". */
    public static final int NOT_READY = 600;

    private final String function;
    private final int code;
    private final String errorName;

    public CudaException(String function, int code, String errorName, String description, String context) {
        super(message(function, code, errorName, description, context));
        this.function = function;
        this.code = code;
        this.errorName = errorName;
    }

    static String message(String function, int code, String errorName, String description, String context) {
        StringBuilder b = new StringBuilder(function).append(" failed: ").append(errorName).append(" (").append(code).append(')');
        if (description != null && !description.isEmpty()) {
            b.append(": ").append(description);
        }
        if (context != null && !context.isEmpty()) {
            b.append(" (").append(context).append(')');
        }
        return b.toString();
    }

    /** The driver function that failed, e.g. {@code cuIpcOpenMemHandle_v2}. */
    public String function() {
        return function;
    }

    /** The {@code CUresult}. */
    public int code() {
        return code;
    }

    /** {@code CUDA_ERROR_...}, or {@code CUresult <n>} when the driver does not know the code. */
    public String errorName() {
        return errorName;
    }
}
