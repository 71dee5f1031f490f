/** Internals of the tcp transport: wire codec, connection ends, I/O loops, pacing, the stall watchdog. */
package io.orbitkv.pd.transport.tcp.internal;
