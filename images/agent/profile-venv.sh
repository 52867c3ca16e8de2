# The home's virtual environment first on PATH in login shells too: /etc/profile sets PATH anew,
# dropping the image's ENV PATH, and then reads this. (Copied to /etc/profile.d by the Dockerfile.)
VIRTUAL_ENV=/home/agent/.venv
case ":$PATH:" in
    *":$VIRTUAL_ENV/bin:"*) ;;
    *) PATH="$VIRTUAL_ENV/bin:$PATH" ;;
esac
export VIRTUAL_ENV PATH
