/**
 * The Mooncake Transfer Engine's C API ({@code transfer_engine_c.h}) through the FFM API: the library loaded lazily
 * from a configured path ({@link io.orbitkv.pd.mooncake.te.MooncakeEngine}), one engine instance
 * ({@link io.orbitkv.pd.mooncake.te.NativeTransferEngine}), the C structs, and the engine's status and result codes
 * mapped to the transports' {@link io.orbitkv.pd.transport.TransferError}s.
 */
package io.orbitkv.pd.mooncake.te;
