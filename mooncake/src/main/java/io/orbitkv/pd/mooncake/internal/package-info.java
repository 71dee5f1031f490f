/**
 * Inside the mooncake transport: the admission protocol (wire format, the receiver's listener, the sender's
 * connection) and the batching of a transfer plan into WRITE requests.
 */
package io.orbitkv.pd.mooncake.internal;
