/**
 * Moving KV pages between engines: the {@link io.orbitkv.pd.transport.KvTransport} interface (one implementation per
 * sub-package) and the receiving side's admission control ({@link io.orbitkv.pd.transport.PushGate}), which every
 * transport goes through before it touches memory.
 */
package io.orbitkv.pd.transport;
