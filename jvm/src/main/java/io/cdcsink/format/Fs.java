package io.cdcsink.format;

import java.io.EOFException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/** The table's files through Hadoop's FileSystem (file:// and s3a:// alike). */
final class Fs {
  final String root; // normalized URI string without trailing '/'
  final FileSystem fs;
  final Path rootPath;

  Fs(String tableUri, Configuration conf) throws CdcSinkFormatException {
    this.root = normalize(tableUri);
    this.rootPath = new Path(root);
    try {
      this.fs = rootPath.getFileSystem(conf == null ? new Configuration() : conf);
    } catch (IOException e) {
      throw new CdcSinkFormatException(root + ": cannot open the file system: " + e.getMessage(), e);
    }
  }

  /** A plain local path becomes file://; a trailing '/' is dropped. */
  static String normalize(String uri) {
    String u = uri;
    while (u.length() > 1 && u.endsWith("/")) u = u.substring(0, u.length() - 1);
    URI parsed;
    try {
      parsed = new URI(u);
    } catch (Exception e) {
      parsed = null;
    }
    if (parsed == null || parsed.getScheme() == null || parsed.getScheme().length() == 1) {
      return new java.io.File(u).getAbsoluteFile().toURI().toString().replaceAll("/$", "");
    }
    return u;
  }

  Path path(String rel) {
    return new Path(root + "/" + rel);
  }

  /** The whole file, or null if it does not exist. */
  byte[] readOrNull(String rel) throws CdcSinkFormatException {
    try (FSDataInputStream in = fs.open(path(rel))) {
      return in.readAllBytes();
    } catch (FileNotFoundException e) {
      return null;
    } catch (IOException e) {
      throw new CdcSinkFormatException(rel + ": cannot read: " + e.getMessage(), e);
    }
  }

  /** The whole file; a missing file is an error naming it. */
  byte[] read(String rel) throws CdcSinkFormatException {
    byte[] d = readOrNull(rel);
    if (d == null) throw new MissingFileException(rel + ": missing file");
    return d;
  }

  /** Names in a directory (relative names only), empty when it does not exist. */
  List<String> list(String relDir) throws CdcSinkFormatException {
    List<String> out = new ArrayList<>();
    try {
      for (FileStatus st : fs.listStatus(path(relDir))) out.add(st.getPath().getName());
    } catch (FileNotFoundException e) {
      return out;
    } catch (IOException e) {
      throw new CdcSinkFormatException(relDir + ": cannot list: " + e.getMessage(), e);
    }
    return out;
  }

  /** An open file for ranged reads. */
  static final class Ranged implements AutoCloseable {
    final String rel;
    final FSDataInputStream in;
    final long size;

    Ranged(String rel, FSDataInputStream in, long size) {
      this.rel = rel;
      this.in = in;
      this.size = size;
    }

    byte[] read(long offset, int length) throws CdcSinkFormatException {
      if (offset < 0 || length < 0 || offset + length > size) {
        throw new CdcSinkFormatException(rel + ": offset " + offset + ": blob of " + length
            + " bytes runs past the end of the file (" + size + " bytes)");
      }
      byte[] b = new byte[length];
      try {
        in.readFully(offset, b);
      } catch (EOFException e) {
        throw new CdcSinkFormatException(rel + ": offset " + offset + ": file is short", e);
      } catch (IOException e) {
        throw new CdcSinkFormatException(rel + ": offset " + offset + ": cannot read: " + e.getMessage(), e);
      }
      return b;
    }

    @Override
    public void close() {
      try {
        in.close();
      } catch (IOException ignored) {
        // read-only
      }
    }
  }

  Ranged openRanged(String rel) throws CdcSinkFormatException {
    try {
      Path p = path(rel);
      FileStatus st = fs.getFileStatus(p);
      return new Ranged(rel, fs.open(p), st.getLen());
    } catch (FileNotFoundException e) {
      throw new MissingFileException(rel + ": missing file");
    } catch (IOException e) {
      throw new CdcSinkFormatException(rel + ": cannot open: " + e.getMessage(), e);
    }
  }

  static byte[] readAll(InputStream in) throws IOException {
    return in.readAllBytes();
  }

  /** A file a committed version names does not exist. */
  static final class MissingFileException extends CdcSinkFormatException {
    private static final long serialVersionUID = 1L;

    MissingFileException(String message) {
      super(message);
    }
  }
}
