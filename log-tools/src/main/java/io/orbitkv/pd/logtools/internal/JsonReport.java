package io.orbitkv.pd.logtools.internal;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;

/**
 * How every tool's {@code --json} prints its report: one pretty-printed JSON object and a newline, written to a
 * stream the caller keeps open (it may be stdout). One place, so the reports stay alike and parseable line by line.
 */
public final class JsonReport {

    /** Writes the members of the report's object. */
    @FunctionalInterface
    public interface Members {
        void write(JsonGenerator g) throws IOException;
    }

    private JsonReport() { }

    /** Writes {@code {members}} and a newline to {@code os}, flushed; an I/O error is rethrown unchecked. */
    public static void write(OutputStream os, Members members) {
        try (JsonGenerator g = new JsonFactory().disable(JsonGenerator.Feature.AUTO_CLOSE_TARGET).createGenerator(os).useDefaultPrettyPrinter()) {
            g.writeStartObject();
            members.write(g);
            g.writeEndObject();
            g.flush();
            os.write('\n');
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
