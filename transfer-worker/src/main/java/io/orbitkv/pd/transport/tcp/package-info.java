/** The {@code tcp} transport: framed, authenticated pushes over plain TCP (wire format in {@code docs/worker.md}). */
package io.orbitkv.pd.transport.tcp;
