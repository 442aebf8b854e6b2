package dev.stoker.encode;

import dev.stoker.text.QwenTokenizer;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * One bundled {@link QwenTokenizer} for every test class of a test run that asks for it, closed when the run ends.
 * Loading it (the Hugging Face tokenizer's native library and the vocabulary) costs the better part of a second, and the
 * feed tests each loaded and closed their own. A class registers {@code @ExtendWith(SharedTokenizer.class)} and reads it
 * from {@link #get()}, or takes a {@link QwenTokenizer} parameter. It lives in stoker-encode's test-jar because the
 * testkit cannot depend on stoker-text (whose tests depend on the testkit).
 *
 * <p>Threading: {@link #get()} may be called from any thread.
 */
public final class SharedTokenizer implements BeforeAllCallback, ParameterResolver {
    private static final ExtensionContext.Namespace NAMESPACE = ExtensionContext.Namespace.create(SharedTokenizer.class);
    private static QwenTokenizer shared; // guarded by SharedTokenizer.class

    /** The run's tokenizer, loaded at the first call. */
    public static synchronized QwenTokenizer get() {
        if (shared == null) shared = QwenTokenizer.bundled();
        return shared;
    }

    /** Loads the tokenizer before the class's own {@code @BeforeAll}, and has the run close it at its end. */
    @Override
    public void beforeAll(ExtensionContext context) {
        context.getRoot().getStore(NAMESPACE).getOrComputeIfAbsent(Closer.class, k -> new Closer(), Closer.class);
        get();
    }

    @Override
    public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
        return parameter.getParameter().getType() == QwenTokenizer.class;
    }

    @Override
    public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
        return get();
    }

    /** Closes the tokenizer when the root context (the whole run) closes. */
    private static final class Closer implements AutoCloseable {
        @Override
        public void close() {
            synchronized (SharedTokenizer.class) {
                if (shared != null) shared.close();
                shared = null;
            }
        }
    }
}
