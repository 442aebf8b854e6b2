package dev.stoker.testkit.s3;

import java.io.IOException;
import java.io.UncheckedIOException;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * Injects one {@link S3MockServer} shared by every test class of the run that asks for it (as a
 * parameter of a constructor, {@code @BeforeAll} or test method), started on first use and closed
 * when the run ends; each class should use its own bucket.
 *
 * <p>Threading: JUnit's root store creates the server at most once.
 */
public final class S3MockExtension implements ParameterResolver {
    private static final ExtensionContext.Namespace NAMESPACE = ExtensionContext.Namespace.create(S3MockExtension.class);

    @Override
    public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
        return parameter.getParameter().getType() == S3MockServer.class;
    }

    @Override
    public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
        return context.getRoot().getStore(NAMESPACE).getOrComputeIfAbsent(S3MockServer.class, k -> {
            try {
                var server = S3MockServer.start();
                System.out.println("S3Mock answered on " + server.endpoint() + " after " + server.startMillis() + " ms");
                return server;
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }, S3MockServer.class);
    }
}
