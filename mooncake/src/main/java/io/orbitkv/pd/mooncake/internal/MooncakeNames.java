package io.orbitkv.pd.mooncake.internal;

/**
 * The names the mooncake transport is known by: its transport name and the attributes of its endpoint. Kept here, and
 * read by {@code MooncakeTransport}, so that this package never refers back to the public one.
 */
public final class MooncakeNames {

    /** The transport's name: endpoints, gate sessions and results carry it. */
    public static final String TRANSPORT = "mooncake";
    /** Endpoint attribute: {@code host:port} of the receiver's admission listener. */
    public static final String CONTROL = "control";
    /** Endpoint attribute: the Transfer Engine protocol the receiver moves bytes with ({@code rdma}, {@code tcp}). */
    public static final String PROTOCOL = "protocol";
    /** Endpoint attribute: the metadata service the receiver's engine is registered with. */
    public static final String METADATA = "metadata";
    /** Endpoint attribute: the admission protocol's version ({@link AdmissionWire#VERSION}). */
    public static final String WIRE_VERSION = "wire-version";

    private MooncakeNames() {
    }
}
