/**
 * Internals of the worker: the command loop over the engine's partition, order execution, the engines table, reports
 * and offset tracking.
 */
package io.orbitkv.pd.worker.internal;
