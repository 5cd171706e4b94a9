package io.cdcsink.format;

/** A table cannot be read: a missing, corrupt or unsupported file, or an impossible request. */
public class CdcSinkFormatException extends java.io.IOException {
  private static final long serialVersionUID = 1L;

  public CdcSinkFormatException(String message) {
    super(message);
  }

  public CdcSinkFormatException(String message, Throwable cause) {
    super(message, cause);
  }
}
