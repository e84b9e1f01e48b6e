package kraftwerk.interop;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.UnsupportedEndpointTypeException;
import org.apache.kafka.common.protocol.Errors;

/**
 * One call's answer in the three shapes of PROTOCOL.md: ok with a result, error with Kafka's
 * error name and whether the client calls it retriable, or unsupported with a reason.
 *
 * <p>Error naming: a Kafka {@link ApiException} (what the client raises for an error code from
 * the server, and for its own timeouts) is named by {@link Errors#forException}, so the harness
 * sees the same names as protocol/errors.py. Anything else is not a Kafka error and is named by
 * its class and message.
 */
final class Outcome {

    private final String status;
    private final Map<String, Object> fields;

    private Outcome(String status, Map<String, Object> fields) {
        this.status = status;
        this.fields = fields;
    }

    static Outcome ok(Map<String, ?> result) {
        Map<String, Object> fields = new LinkedHashMap<>();
        fields.put("result", result);
        return new Outcome("ok", fields);
    }

    static Outcome error(String error, boolean retriable) {
        return error(error, retriable, null);
    }

    static Outcome error(String error, boolean retriable, String message) {
        Map<String, Object> fields = new LinkedHashMap<>();
        fields.put("error", error);
        fields.put("retriable", retriable);
        if (message != null) {
            // Not in PROTOCOL.md's shape; the harness ignores it, a person reading a log does not.
            fields.put("message", message);
        }
        return new Outcome("error", fields);
    }

    static Outcome unsupported(String reason) {
        Map<String, Object> fields = new LinkedHashMap<>();
        fields.put("reason", reason);
        return new Outcome("unsupported", fields);
    }

    /** The answer for a failed call, from whatever the future or the client threw. */
    static Outcome failure(Throwable thrown) {
        Throwable cause = unwrap(thrown);
        if (cause instanceof UnsupportedEndpointTypeException) {
            // Raised by the client itself, before sending: with bootstrap.controllers (KIP-919)
            // the Java Admin makes only the calls it knows controllers serve. The client has no
            // way to make this call on this path, which is what "unsupported" means.
            return unsupported("kafka-clients makes no such call with bootstrap.controllers: " + cause.getMessage());
        }
        if (cause instanceof ApiException api) {
            Errors error = Errors.forException(api);
            String name = error.name();
            if (error == Errors.UNKNOWN_SERVER_ERROR
                    && !(api instanceof org.apache.kafka.common.errors.UnknownServerException)) {
                // An ApiException with no wire code of its own (client-side only): its class
                // says more than UNKNOWN_SERVER_ERROR would.
                name = api.getClass().getSimpleName();
            }
            return error(name, api instanceof RetriableException, api.getMessage());
        }
        if (cause instanceof TimeoutException) {
            // The driver's own bound ran out before the client's: the same meaning as the
            // client's timeout, so the same name.
            return error(Errors.REQUEST_TIMED_OUT.name(), true, "driver bound: " + cause.getMessage());
        }
        String text = cause.getClass().getName() + (cause.getMessage() == null ? "" : ": " + cause.getMessage());
        return error(text, false);
    }

    private static Throwable unwrap(Throwable thrown) {
        Throwable cause = thrown;
        // Bounded: futures wrap once or twice, never in a cycle worth following further.
        for (int depth = 0; depth < 8; depth++) {
            if ((cause instanceof ExecutionException || cause instanceof CompletionException)
                    && cause.getCause() != null) {
                cause = cause.getCause();
            } else {
                break;
            }
        }
        return cause;
    }

    Map<String, Object> toLine(JsonNode id) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("id", id);
        line.put("status", status);
        line.putAll(fields);
        return line;
    }
}
