package io.orbitkv.pd.schemas.registry;

import org.apache.avro.Schema;

/**
 * The part of the Confluent-compatible schema registry REST API that the registry serde needs. Implementations
 * cache: a schema is registered once per subject and an id is looked up once per process.
 */
public interface SchemaRegistryClient extends AutoCloseable {

    /**
     * Registers {@code schema} under {@code subject} (idempotent on the server: the same schema gets the same id).
     *
     * @return the registry's global schema id
     * @throws RegistryException when the registry refuses it (for example as incompatible) or cannot be reached
     */
    int register(String subject, Schema schema);

    /** Looks up the id of an already registered schema without registering it. */
    int idOf(String subject, Schema schema);

    /** The schema with this global id. */
    Schema schemaById(int id);

    @Override
    default void close() { }

    /** A registry call that failed, with the HTTP status (or -1 when the registry was unreachable). */
    final class RegistryException extends RuntimeException {
        private final int status;
        private final int errorCode;

        public RegistryException(String message, int status, int errorCode, Throwable cause) {
            super(message, cause);
            this.status = status;
            this.errorCode = errorCode;
        }

        /** HTTP status, or -1 when no answer came. */
        public int status() {
            return status;
        }

        /** The registry's own error code (for example 40403 schema not found), or -1. */
        public int errorCode() {
            return errorCode;
        }
    }
}
