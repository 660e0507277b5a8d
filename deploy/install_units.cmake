# Run by `cmake --install` (deploy/CMakeLists.txt): writes the systemd units with the programs'
# installed paths (PREFIX/bin) and installs them in PREFIX/lib/systemd/system, which systemd
# searches for /usr and /usr/local alike. DESTDIR is honoured by file(INSTALL).
set(GANTRY_BINDIR "${CMAKE_INSTALL_PREFIX}/${GANTRY_INSTALL_BINDIR}")
set(GANTRY_SHAREDIR "${CMAKE_INSTALL_PREFIX}/${GANTRY_INSTALL_SHAREDIR}")
set(units)
foreach(unit gantryd.service gantry-agent.service gantry-failopen.service)
  configure_file("${GANTRY_DEPLOY_SRC}/systemd/${unit}.in" "${GANTRY_DEPLOY_TMP}/${unit}" @ONLY)
  list(APPEND units "${GANTRY_DEPLOY_TMP}/${unit}")
endforeach()
list(APPEND units "${GANTRY_DEPLOY_SRC}/systemd/gantry-failopen.timer")
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" TYPE FILE FILES ${units})
