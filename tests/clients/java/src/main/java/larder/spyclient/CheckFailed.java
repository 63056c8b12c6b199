package larder.spyclient;

/** An expectation that did not hold; its message says what and how. */
final class CheckFailed extends RuntimeException {
  private static final long serialVersionUID = 1L;

  CheckFailed(String message) {
    super(message);
  }
}
