/**
 * The {@code mooncake} transport: KV pages pushed across nodes as one-sided WRITEs through the Mooncake Transfer
 * Engine (RDMA in production, its TCP transport for tests), each push admitted and confirmed by the receiving worker
 * over a small TCP conversation. {@link io.orbitkv.pd.mooncake.MooncakeTransportProvider} plugs it into the worker
 * by name. The binding itself is in {@link io.orbitkv.pd.mooncake.te}; design, fencing and security model in
 * {@code docs/mooncake.md}.
 */
package io.orbitkv.pd.mooncake;
