package kraftwerk.interop;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;

/**
 * The client-matrix driver for Apache Kafka's Java AdminClient (tests/clients/PROTOCOL.md).
 *
 * <p>One process holds one {@link Admin} for its whole life and answers one JSON line per call
 * read from stdin. Rules it keeps: stdout carries protocol lines only (the real stdout is taken
 * for the protocol and {@code System.out} is pointed at stderr, so a stray print from a library
 * cannot corrupt the stream); calls are made one at a time and never retried here; every call is
 * bounded by its {@code timeout_ms}.
 */
public final class AdminDriver {

    static final String CLIENT_NAME = "kafka-clients-java";
    /** Both the Admin's own timeouts and a call's default bound, as PROTOCOL.md says. */
    static final int DEFAULT_TIMEOUT_MS = 15_000;
    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(5);

    private final ObjectMapper json = new ObjectMapper();
    private final PrintStream protocolOut;

    private AdminDriver(PrintStream protocolOut) {
        this.protocolOut = protocolOut;
    }

    public static void main(String[] argv) {
        // Quiet, stderr-only logging must be configured before kafka-clients makes its first logger.
        defaultProperty("org.slf4j.simpleLogger.logFile", "System.err");
        defaultProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        PrintStream protocolOut = new PrintStream(
                new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        int code = new AdminDriver(protocolOut).run(argv);
        protocolOut.flush();
        // Admin's network thread is not a daemon in every state; leave no doubt about exiting.
        System.exit(code);
    }

    private static void defaultProperty(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    private int run(String[] argv) {
        Admin admin;
        try {
            Options options = Options.parse(argv);
            admin = Admin.create(adminProperties(options));
        } catch (RuntimeException e) {
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("ready", false);
            line.put("error", describeChain(e));
            emit(line);
            return 1;
        }
        Map<String, Object> ready = new LinkedHashMap<>();
        ready.put("ready", true);
        ready.put("client", CLIENT_NAME);
        ready.put("version", kafkaClientsVersion());
        emit(ready);

        AdminCalls calls = new AdminCalls(admin);
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                if (!answer(calls, line)) {
                    break;
                }
            }
        } catch (IOException e) {
            System.err.println("driver: stdin failed: " + e);
        } finally {
            admin.close(CLOSE_TIMEOUT);
        }
        return 0;
    }

    /** Answers one request line; false once the client is to close. */
    private boolean answer(AdminCalls calls, String line) {
        JsonNode request;
        try {
            request = json.readTree(line);
        } catch (JsonProcessingException e) {
            emit(Outcome.error("bad request line: " + e.getOriginalMessage(), false).toLine(null));
            return true;
        }
        JsonNode id = request.get("id");
        String call = request.path("call").asText("");
        if (call.equals("close")) {
            emit(Outcome.ok(Map.of()).toLine(id));
            return false;
        }
        JsonNode args = request.path("args");
        if (!args.isObject()) {
            args = json.createObjectNode();
        }
        emit(calls.call(call, (ObjectNode) args).toLine(id));
        return true;
    }

    private void emit(Object line) {
        try {
            protocolOut.println(json.writeValueAsString(line));
        } catch (IOException e) {
            // Only reachable through a value Jackson cannot serialise: a bug here, not in the call.
            throw new IllegalStateException("cannot write protocol line", e);
        }
    }

    static Properties adminProperties(Options options) {
        Properties props = new Properties();
        props.put(options.controllerPath
                        ? AdminClientConfig.BOOTSTRAP_CONTROLLERS_CONFIG
                        : AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG,
                options.bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "kraftwerk-matrix-java");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(DEFAULT_TIMEOUT_MS));
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Integer.toString(DEFAULT_TIMEOUT_MS));
        return props;
    }

    /** A failure and its causes in one line: Admin.create wraps the useful reason. */
    static String describeChain(Throwable thrown) {
        StringBuilder text = new StringBuilder();
        Throwable cause = thrown;
        for (int depth = 0; cause != null && depth < 5; depth++, cause = cause.getCause()) {
            if (text.length() > 0) {
                text.append(": ");
            }
            text.append(cause.getMessage() == null ? cause.getClass().getSimpleName() : cause.getMessage());
        }
        return text.toString();
    }

    /** The kafka-clients version from the properties file its jar ships. */
    static String kafkaClientsVersion() {
        Properties props = new Properties();
        try (InputStream in = Admin.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) {
                props.load(in);
            }
        } catch (IOException e) {
            return "unknown";
        }
        return props.getProperty("version", "unknown");
    }

    /** The command line: {@code --bootstrap HOST:PORT[,...] --path broker|controller}. */
    static final class Options {
        final String bootstrap;
        final boolean controllerPath;

        private Options(String bootstrap, boolean controllerPath) {
            this.bootstrap = bootstrap;
            this.controllerPath = controllerPath;
        }

        static Options parse(String[] argv) {
            String bootstrap = null;
            String path = "broker";
            for (int i = 0; i < argv.length; i++) {
                String flag = argv[i];
                if (i + 1 >= argv.length) {
                    throw new IllegalArgumentException("missing value after " + flag);
                }
                String value = argv[++i];
                switch (flag) {
                    case "--bootstrap" -> bootstrap = value;
                    case "--path" -> path = value;
                    default -> throw new IllegalArgumentException("unknown option " + flag);
                }
            }
            if (bootstrap == null || bootstrap.isBlank()) {
                throw new IllegalArgumentException("usage: --bootstrap HOST:PORT[,...] --path broker|controller");
            }
            if (!path.equals("broker") && !path.equals("controller")) {
                throw new IllegalArgumentException("--path must be broker or controller, not " + path);
            }
            return new Options(bootstrap, path.equals("controller"));
        }
    }
}
