/**
 * The transfer worker process: {@link io.orbitkv.pd.worker.WorkerConfig} (validated config),
 * {@link io.orbitkv.pd.worker.WorkerApp} (wiring and lifecycle), {@link io.orbitkv.pd.worker.WorkerMain} (plain entry point).
 */
package io.orbitkv.pd.worker;
