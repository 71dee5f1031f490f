package io.orbitkv.pd.schemas;

/** How event values are framed on the wire. */
public enum SerdeMode {
    /**
     * Avro single-object encoding (0xC3 0x01, 8-byte CRC-64-AVRO fingerprint, payload). Writer schemas are
     * resolved from the schemas compiled into this module and the released versions kept beside them, so no
     * server is needed. The default.
     */
    EMBEDDED,
    /**
     * The Confluent wire format (magic byte 0, 4-byte schema id, payload) with schemas registered in and looked
     * up from a Confluent-compatible REST registry (Confluent Schema Registry, Apicurio ccompat, Karapace,
     * Redpanda).
     */
    REGISTRY
}
