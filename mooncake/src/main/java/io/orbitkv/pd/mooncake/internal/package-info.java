/**
 * Inside the mooncake transport: the admission protocol (wire format, the receiver's listener, the sender's
 * connection), the batching of a transfer plan into WRITE requests, and the transport's names ({@link
 * io.orbitkv.pd.mooncake.internal.MooncakeNames}). Nothing here refers back to {@code io.orbitkv.pd.mooncake}.
 */
package io.orbitkv.pd.mooncake.internal;
