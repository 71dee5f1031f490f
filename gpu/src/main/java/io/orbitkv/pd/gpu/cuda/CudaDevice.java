package io.orbitkv.pd.gpu.cuda;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One GPU and its primary context (retained while this object is open). Work for the device runs on threads that
 * called {@link #bind()} first: CUDA keeps the current context per thread.
 */
public final class CudaDevice implements AutoCloseable {

    private final CudaDriver driver;
    private final int ordinal;
    private final int handle;
    private final MemorySegment context;
    private final String name;
    private final int multiprocessors;
    private final int computeMajor;
    private final int computeMinor;
    private final AtomicBoolean closed = new AtomicBoolean();

    private CudaDevice(CudaDriver driver, int ordinal, int handle, MemorySegment context) {
        this.driver = driver;
        this.ordinal = ordinal;
        this.handle = handle;
        this.context = context;
        this.name = driver.deviceName(handle);
        this.multiprocessors = driver.deviceAttribute(handle, CudaDriver.ATTR_MULTIPROCESSOR_COUNT);
        this.computeMajor = driver.deviceAttribute(handle, CudaDriver.ATTR_COMPUTE_CAPABILITY_MAJOR);
        this.computeMinor = driver.deviceAttribute(handle, CudaDriver.ATTR_COMPUTE_CAPABILITY_MINOR);
    }

    /**
     * Opens device {@code ordinal} (as this process numbers them) and makes its primary context current on the
     * calling thread.
     *
     * @throws IllegalArgumentException when there is no such device
     */
    public static CudaDevice open(CudaDriver driver, int ordinal) {
        int count = driver.deviceCount();
        if (ordinal < 0 || ordinal >= count) {
            throw new IllegalArgumentException("transfer.cuda.device: " + ordinal + " is not a device of this process (it sees " + count + ")");
        }
        int handle = driver.device(ordinal);
        MemorySegment ctx = driver.primaryContextRetain(handle);
        try {
            driver.setCurrentContext(ctx);
            return new CudaDevice(driver, ordinal, handle, ctx);
        } catch (RuntimeException e) {
            driver.primaryContextRelease(handle);
            throw e;
        }
    }

    public CudaDriver driver() {
        return driver;
    }

    public int ordinal() {
        return ordinal;
    }

    /** The {@code CUdevice}. */
    public int handle() {
        return handle;
    }

    public MemorySegment context() {
        return context;
    }

    /** {@code cuda:<ordinal>}: the {@code MemoryRegion.location} of this device's memory. */
    public String location() {
        return "cuda:" + ordinal;
    }

    public String name() {
        return name;
    }

    public int multiprocessors() {
        return multiprocessors;
    }

    /** e.g. {@code 9.0} for Hopper. */
    public String computeCapability() {
        return computeMajor + "." + computeMinor;
    }

    /** Makes this device's context current on the calling thread. */
    public void bind() {
        driver.setCurrentContext(context);
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            driver.primaryContextRelease(handle);
        }
    }

    @Override
    public String toString() {
        return location() + " " + name + " (sm_" + computeMajor + computeMinor + ", " + multiprocessors + " SMs)";
    }
}
