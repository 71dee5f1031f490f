/**
 * The KV memory model, shared by engines and workers: layouts ({@link io.orbitkv.pd.kv.KvGeometry}), paged pools
 * ({@link io.orbitkv.pd.kv.KvPool}, off-heap {@link io.orbitkv.pd.kv.HostKvPool}), page lists and runs
 * ({@link io.orbitkv.pd.kv.BlockRuns}) and transfer plans ({@link io.orbitkv.pd.kv.TransferPlan}).
 */
package io.orbitkv.pd.kv;
