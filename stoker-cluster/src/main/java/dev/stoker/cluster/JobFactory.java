package dev.stoker.cluster;

import dev.stoker.pipeline.feed.TaskProducer;
import dev.stoker.store.ShmObjectStore;
import java.io.IOException;
import java.util.List;

/**
 * Turns a job's feed options (the command-line options of {@code serve}, the same on every node)
 * into the node's side of the job: a {@link TaskProducer} writing into the node's store. The CLI
 * provides it, so that every node parses the options exactly as an embedded {@code serve} would.
 */
@FunctionalInterface
public interface JobFactory {
    /**
     * Opens the data set and the pipeline; {@code maxWorkers} bounds the workers the job may use on
     * this node. The returned producer owns whatever it opened (closing it closes them).
     */
    Opened open(List<String> args, ShmObjectStore store, int maxWorkers) throws IOException;

    /** The producer and what to close after it (the object source it reads through). */
    record Opened(TaskProducer producer, AutoCloseable resources) implements AutoCloseable {
        @Override
        public void close() throws Exception {
            try {
                producer.close();
            } finally {
                if (resources != null) resources.close();
            }
        }
    }
}
