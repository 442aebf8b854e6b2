package org.apache.parquet;

import org.apache.parquet.bytes.HeapByteBufferAllocator;
import org.apache.parquet.compression.CompressionCodecFactory;
import org.apache.parquet.conf.PlainParquetConfiguration;
import org.apache.parquet.format.converter.ParquetMetadataConverter;

/**
 * Read options built without {@link ParquetReadOptions.Builder}, whose constructor creates parquet-java's Hadoop
 * codec factory and so loads Hadoop's classes. It lives in parquet's package for the package-private constructor
 * (Stoker runs on the class path, where split packages are allowed); the constructor's parameters are those of the
 * parquet-java version the module's pom pins, and a change there fails the build here.
 */
public final class StokerReadOptions {
    private StokerReadOptions() { }

    /** Options for reading whole row groups with {@code codecs}: no filters, no page checksums, no vectored I/O. */
    public static ParquetReadOptions of(CompressionCodecFactory codecs) {
        return new ParquetReadOptions(
                false, // useSignedStringMinMax
                false, // useStatsFilter
                false, // useDictionaryFilter
                false, // useRecordFilter
                false, // useColumnIndexFilter
                false, // usePageChecksumVerification
                false, // useBloomFilter
                false, // useOffHeapDecryptBuffer
                false, // useHadoopVectoredIo
                null, // recordFilter
                ParquetMetadataConverter.NO_FILTER,
                codecs,
                new HeapByteBufferAllocator(),
                8 << 20, // maxAllocationSize
                new java.util.HashMap<>(),
                null, // fileDecryptionProperties
                null, // metricsCallback
                new PlainParquetConfiguration());
    }
}
